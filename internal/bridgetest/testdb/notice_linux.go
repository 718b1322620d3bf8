package testdb

import (
	"os"

	"golang.org/x/sys/unix"
)

// parentStderr returns a duplicate of the go command's own fd 2, taken
// with pidfd_getfd(2) (Linux 5.6+; the kernel allows it where ptrace of
// the parent is allowed). The duplicate shares the open file description,
// and with it the file offset: a line written through it to a log file the
// go command's output is redirected into (`go test ./... > log 2>&1`)
// moves the go command's own offset past the line, where a file opened
// again by name (/proc/<ppid>/fd/2) has an offset of its own and the go
// command's next line overwrites what was written through it. nil when the
// kernel refuses.
func parentStderr() *os.File {
	pidfd, err := unix.PidfdOpen(os.Getppid(), 0)
	if err != nil {
		return nil
	}
	defer unix.Close(pidfd)
	fd, err := unix.PidfdGetfd(pidfd, 2, 0)
	if err != nil {
		return nil
	}
	return os.NewFile(uintptr(fd), "go command's stderr")
}
