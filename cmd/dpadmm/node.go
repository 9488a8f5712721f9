package main

import (
	"errors"
	"io"
)

func runNode(args []string, stdout, stderr io.Writer) error {
	return errors.New("node: not available in this build")
}
