package main

import (
	"errors"
	"io"
)

func runTestnet(args []string, stdout, stderr io.Writer) error {
	return errors.New("testnet: not available in this build")
}
