//go:build long

package testnet

// longRun: built with -tags long, the mode-matrix tests run every case (.ci/run does).
const longRun = true
