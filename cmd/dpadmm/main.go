// Command dpadmm is a peer-to-peer node for differentially private decentralized
// training. It has one subcommand per task: node, testnet, account, keys, experiment,
// audit, eval, predict, export, status and version.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

const usage = `dpadmm: differentially private decentralized ADMM over libp2p

Usage:
  dpadmm <command> [flags]

Commands:
  testnet     run a local testnet (deterministic simulator, in-process or multi-process)
  account     privacy accounting: plan a run, or recompute figures from a trace
  node        run one node on a LAN or an existing libp2p network
  keys        swarm keys, signed allow-lists and peer IDs that close a run to outsiders
  experiment  reproduce the papers' comparisons (CSV and PNG output)
  audit       empirical privacy audit: lower bounds on epsilon next to the claimed upper bounds
  eval        score a model.json (or a testnet report's model) on a dataset
  predict     apply a model to raw CSV rows: labels and class probabilities, or predictions
  export      write a model as ONNX (scaling included, float64) or as a CSV of coefficients
  status      the state of a running node, from its --http address
  version     print the version, commit and Go version (also --version)

Run 'dpadmm <command> --help' for the flags of a command.
With no command, 'dpadmm' prints this text; 'dpadmm testnet' with no flags runs a demo.
Exit codes: 0 success, 1 runtime error, 2 usage error (unknown flag, bad flag value,
missing or unexpected argument), 130 after Ctrl-C (SIGINT), 143 after SIGTERM.
`

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

// errUsage marks a usage error (exit code 2). Every *usageError matches it; a bare
// errUsage is an error whose message has already been printed.
var errUsage = errors.New("usage")

// commands are the subcommand names, for suggestions.
var commands = []string{"testnet", "account", "node", "keys", "experiment", "audit", "eval", "predict", "export", "status", "version", "help"}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches to a subcommand and returns the process exit code:
// 0 on success, 2 on a usage error, 1 on any other error, 128 + the signal number (130
// for SIGINT, 143 for SIGTERM) when a signal stopped a command early.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stdout, usage)
		return 0
	}
	ctx, stop := context.Background(), func() {}
	if args[0] == "testnet" || args[0] == "node" || args[0] == "experiment" {
		// These stop early on SIGINT or SIGTERM and write what they have; the others
		// keep the default action (the process ends at once).
		ctx, stop = signalContext(ctx)
	}
	defer stop()
	var err error
	switch args[0] {
	case "testnet":
		err = runTestnet(ctx, args[1:], stdout, stderr)
	case "account":
		err = runAccount(args[1:], stdout, stderr)
	case "node":
		err = runNode(ctx, args[1:], stdout, stderr)
	case "keys":
		err = runKeys(args[1:], stdout, stderr)
	case "experiment":
		err = runExperiment(ctx, args[1:], stdout, stderr)
	case "audit":
		err = runAudit(args[1:], stdout, stderr)
	case "eval":
		err = runEval(args[1:], stdout, stderr)
	case "predict":
		err = runPredict(args[1:], stdout, stderr)
	case "export":
		err = runExport(args[1:], stdout, stderr)
	case "status":
		err = runStatus(args[1:], stdout, stderr)
	case "version", "--version", "-version":
		err = runVersion(args[1:], stdout)
	case "help", "-h", "--help", "-help":
		if len(args) > 1 && args[0] == "help" && slices.Contains(commands, args[1]) && args[1] != "help" {
			return run(append(args[1:2], "--help"), stdout, stderr) // dpadmm help CMD: CMD's help
		}
		fmt.Fprint(stdout, usage)
	default:
		err = unknownCommand("", "command", args[0], commands)
		if strings.HasPrefix(args[0], "-") {
			err = unknownCommand("", "flag", args[0], []string{"--help", "--version"})
		}
	}
	if code, ok := exitCodeOf(ctx, err); ok {
		fmt.Fprintf(stderr, "dpadmm %s: %v\n", args[0], err)
		return code
	}
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		printUsageError(stderr, ue)
		return 2
	case errors.Is(err, errUsage):
		return 2
	default:
		fmt.Fprintf(stderr, "dpadmm %s: %v\n", args[0], err)
		return 1
	}
}
