//go:build !unix

package broker

import "os"

// lockStore does not lock on this platform; run one embedded server per
// data directory.
func lockStore(string) (*os.File, error) { return nil, nil }
