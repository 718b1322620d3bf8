//go:build !linux

package testdb

import "os"

// parentStderr is nil outside Linux: the notice goes to the terminal or to
// the test binary's own stderr.
func parentStderr() *os.File { return nil }
