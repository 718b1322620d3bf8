package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/outbox-bridge/bridge/internal/config"
)

// ConnectConfig says how to reach NATS.
type ConnectConfig struct {
	// URL is one nats:// URL or several, comma-separated. Required.
	URL string
	// Name is the client connection name shown by the server.
	Name string
	// CredsFile is a .creds file (user JWT and nkey seed).
	CredsFile string
	// NkeySeedFile is a file holding a user nkey seed.
	NkeySeedFile string
	// User and Password authenticate by name; Token by token.
	User, Password, Token string
	// CAFile verifies the server's certificate; CertFile and KeyFile are the
	// client certificate for mutual TLS.
	CAFile, CertFile, KeyFile string
	// Denials, when set, records the publish permission violations the
	// server reports on the connection.
	Denials *Denials
	// NoReconnectBuffer makes publishes fail at once while the connection
	// is down, instead of waiting in nats.go's reconnect buffer (8 MB) to be
	// sent after the reconnect. A source that publishes in order needs it:
	// a message buffered during a reconnect would be stored before an
	// earlier one lost with the connection and published again later.
	NoReconnectBuffer bool
}

// Connect opens a connection that reconnects forever (every 250 ms to
// 2 s) and logs its disconnects and reconnects. It fails when the first
// connection cannot be made before ctx ends or within 10 s.
func Connect(ctx context.Context, cfg ConnectConfig, logger *slog.Logger) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(cfg.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(250*time.Millisecond, time.Second),
		nats.Timeout(5 * time.Second),
		// A server that stops answering (frozen, or a partition that keeps
		// the TCP connection open) is given up after PingInterval ×
		// MaxPingsOut (2 by default) and reconnected to, within about a
		// minute instead of nats.go's 2-minute interval's 4 to 6. The relay
		// notices sooner by its own pings (Pinger).
		nats.PingInterval(20 * time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				logger.Warn("NATS disconnected", slog.Any("error", err))
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			logger.Info("NATS reconnected", slog.String("server", redactNATSURL(nc.ConnectedUrl())))
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			denied, log := cfg.Denials.Record(err)
			switch {
			case !denied:
				logger.Error("NATS asynchronous error", slog.Any("error", err))
			case log: // once a minute per subject; the rows of the subject record it
				logger.Error("NATS refused a publish or the relay's reply inbox: no permission", slog.Any("error", err))
			}
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			if err := nc.LastError(); err != nil {
				logger.Warn("NATS connection closed", slog.Any("error", err))
			}
		}),
	}
	if cfg.NoReconnectBuffer {
		opts = append(opts, nats.ReconnectBufSize(-1)) // nats.go: "It can be disabled by setting it to -1"
	}
	switch {
	case cfg.CredsFile != "":
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	case cfg.NkeySeedFile != "":
		opt, err := nats.NkeyOptionFromSeed(cfg.NkeySeedFile)
		if err != nil {
			return nil, &config.Error{Key: "nats.nkey_seed_file", Value: cfg.NkeySeedFile,
				Allowed: "must hold an nkey user seed (SU…): " + err.Error()}
		}
		opts = append(opts, opt)
	case cfg.User != "":
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	case cfg.Token != "":
		opts = append(opts, nats.Token(cfg.Token))
	}
	if cfg.CAFile != "" {
		opts = append(opts, nats.RootCAs(cfg.CAFile))
	}
	if cfg.CertFile != "" || cfg.KeyFile != "" {
		opts = append(opts, nats.ClientCert(cfg.CertFile, cfg.KeyFile))
	}

	type result struct {
		nc  *nats.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		nc, err := nats.Connect(cfg.URL, opts...)
		ch <- result{nc, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, fmt.Errorf("connect to NATS at %s: %w%s", redactNATSURL(cfg.URL), r.err, clientCertHint(cfg, r.err))
		}
		return r.nc, nil
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.nc != nil {
				r.nc.Close()
			}
		}()
		return nil, fmt.Errorf("connect to NATS at %s: %w", redactNATSURL(cfg.URL), ctx.Err())
	}
}

// clientCertHint explains a connection refused during TLS setup when no
// client certificate is configured. A server that requires one (mutual
// TLS) rejects the client right after the handshake, which reaches the
// client, depending on timing, as the server's alert ("remote error: tls:
// certificate required") or as a connection closed after the handshake
// (nats.ErrTLS wrapping EOF, a broken pipe or a reset), which does not say
// why.
func clientCertHint(cfg ConnectConfig, err error) string {
	if cfg.CertFile != "" {
		return ""
	}
	var op *net.OpError
	alert := errors.As(err, &op) && op.Op == "remote error"
	closed := errors.Is(err, nats.ErrTLS) &&
		(errors.Is(err, io.EOF) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET))
	if !alert && !closed {
		return ""
	}
	return "; no client certificate is configured: if the server requires one (mutual TLS), " +
		"set nats.tls.cert_file and nats.tls.key_file (BRIDGE_NATS_TLS_CERT_FILE, BRIDGE_NATS_TLS_KEY_FILE)"
}
