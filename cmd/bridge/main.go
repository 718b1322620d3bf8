// Command bridge relays a transactional outbox table to NATS JetStream.
//
// Run `bridge --help` for the commands. Exit codes: 0 clean stop, 1
// runtime failure, 2 bad usage or configuration.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/replay"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	ctx, stop := signalContext()
	defer stop()
	root := newRootCommand()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintln(os.Stderr, "bridge: "+err.Error())
	if isUsage(err) {
		return 2
	}
	if errors.Is(err, replay.ErrPartial) {
		return 3 // bridge replay finished with rows it could not send
	}
	return 1
}

// signalContext ends at the first SIGTERM or SIGINT, which starts a
// graceful drain; a second signal exits at once with status 1.
func signalContext() (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		sig, ok := <-sigs
		if !ok {
			return
		}
		fmt.Fprintf(os.Stderr, "bridge: %s received, stopping (send it again to exit at once)\n", sig)
		cancel()
		if sig, ok = <-sigs; ok {
			fmt.Fprintf(os.Stderr, "bridge: second %s, exiting at once\n", sig)
			os.Exit(1)
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(sigs)
		cancel()
	}
}

// usageError marks bad usage or configuration: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usage(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// isUsage reports whether err is bad usage or configuration: a usageError,
// cobra's own usage errors, or an outbox table that is not there
// (outbox.ErrNoTable: --table or database.table names a table that was
// never migrated, a mistake in the configuration like a bad URL; bridge
// run does not stop for it, it waits for the migration).
func isUsage(err error) bool {
	var u usageError
	return errors.As(err, &u) || isCobraUsage(err) || errors.Is(err, outbox.ErrNoTable)
}
