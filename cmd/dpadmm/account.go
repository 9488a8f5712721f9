package main

import (
	"errors"
	"io"
)

func runAccount(args []string, stdout, stderr io.Writer) error {
	return errors.New("account: not available in this build")
}
