package broker

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// EmbeddedMaxPayload is the max_payload of the embedded server: nats-server's
// default, 1 MiB.
const EmbeddedMaxPayload = server.MAX_PAYLOAD_SIZE

// ErrAddrInUse is returned (wrapped) by StartEmbedded when its client
// address is taken, usually by another NATS server.
var ErrAddrInUse = errors.New("address already in use")

// ErrStoreInUse is returned (wrapped) by StartEmbedded when another
// process holds the store directory.
var ErrStoreInUse = errors.New("JetStream store in use")

// Embedded is an in-process NATS server with JetStream.
type Embedded struct {
	srv  *server.Server
	lock *os.File
}

// StartEmbedded starts a NATS server with JetStream in this process,
// listening for clients on listen (host:port) and storing streams in
// storeDir. It returns once the server accepts connections (at most 10 s).
//
// The store directory is locked first, so a second process cannot start a
// server on it.
//
// Errors: ErrStoreInUse (wrapped) when another process holds storeDir;
// ErrAddrInUse (wrapped, naming the address and the flags that change it)
// when listen is taken; otherwise the server's own error.
func StartEmbedded(listen, storeDir string, logger *slog.Logger) (_ *Embedded, err error) {
	lock, err := lockStore(storeDir)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS server: %w", err)
	}
	defer func() {
		if err != nil && lock != nil {
			lock.Close()
		}
	}()
	host, portText, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS server: listen address %q: %w; expected host:port such as 127.0.0.1:4222", listen, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 0 || port > 65535 {
		return nil, fmt.Errorf("embedded NATS server: listen address %q: port must be a number from 0 to 65535", listen)
	}
	// The server would only log a taken port and exit the process; probe
	// first to fail with an error that says what to do.
	if port != 0 {
		probe, err := net.Listen("tcp", listen)
		if err != nil {
			if errors.Is(err, syscall.EADDRINUSE) {
				return nil, fmt.Errorf("embedded NATS server: cannot listen on %s: %w (is another NATS server running there?); "+
					"choose a free address with --nats-listen (BRIDGE_NATS_LISTEN), or use that server with --nats-url nats://%s "+
					"(and --ensure-stream 'EVENTS:events.>' to create the stream there)",
					listen, ErrAddrInUse, listen)
			}
			return nil, fmt.Errorf("embedded NATS server: cannot listen on %s: %w", listen, err)
		}
		probe.Close()
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	srv, err := server.NewServer(&server.Options{
		ServerName: "bridge-embedded",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   storeDir,
		MaxPayload: EmbeddedMaxPayload,
		NoSigs:     true,
		NoLog:      true,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded NATS server: %w", err)
	}
	srv.SetLoggerV2(ServerLog(logger), false, false, false)
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("embedded NATS server on %s with store %s did not become ready within 10s", listen, storeDir)
	}
	logger.Info("embedded NATS server started", slog.String("client_url", srv.ClientURL()), slog.String("store_dir", storeDir))
	return &Embedded{srv: srv, lock: lock}, nil
}

// ClientURL is the nats:// URL clients connect to.
func (e *Embedded) ClientURL() string { return e.srv.ClientURL() }

// Shutdown stops the server, waits until it has stopped and releases the
// store. Idempotent.
func (e *Embedded) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
	if e.lock != nil {
		e.lock.Close()
		e.lock = nil
	}
}
