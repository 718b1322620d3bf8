//go:build unix

package broker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockStore takes an exclusive lock on dir/LOCK so that two embedded
// servers never share one JetStream store: nats-server does not lock its
// store directory, and two servers writing one store hand out the same
// stream sequences and lose acknowledged messages. The lock is released
// when the returned file is closed or the process ends.
func lockStore(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("create JetStream store %s: %w", dir, err)
	}
	path := filepath.Join(dir, "LOCK")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked by another process (another `bridge run` with the same --data-dir?); "+
				"stop it, or give this one its own --data-dir", ErrStoreInUse, dir)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}
