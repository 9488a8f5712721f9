//go:build !long

package testnet

// longRun: without -tags long, the mode-matrix tests run their first case on hosts only, so that
// 'go test ./...' stays short; .ci/run also runs the long build, with every case.
const longRun = false
