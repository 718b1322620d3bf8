package broker

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats-server/v2/server"
)

// ServerLog is a nats-server logger (server.Logger) that writes the
// server's warnings and errors to logger, each with component
// "nats-server"; its notices, debug and trace lines are dropped. An
// in-process server answers some failures with a bare API error and logs
// the cause alone: a stream it cannot create is error 10049 "error creating
// store for stream" to the client, and "Stream create failed for ...:
// storage directory is not writable" (or the disk's own error) in its log.
//
// Install it with srv.SetLoggerV2(ServerLog(logger), false, false, false)
// after server.NewServer; Options.NoLog keeps the server from installing
// its own.
func ServerLog(logger *slog.Logger) server.Logger {
	return serverLog{logger.With(slog.String("component", "nats-server"))}
}

type serverLog struct{ l *slog.Logger }

func (s serverLog) log(level slog.Level, format string, v []any) {
	if s.l.Enabled(context.Background(), level) {
		s.l.Log(context.Background(), level, fmt.Sprintf(format, v...))
	}
}

func (serverLog) Noticef(string, ...any)           {}
func (serverLog) Debugf(string, ...any)            {}
func (serverLog) Tracef(string, ...any)            {}
func (s serverLog) Warnf(format string, v ...any)  { s.log(slog.LevelWarn, format, v) }
func (s serverLog) Errorf(format string, v ...any) { s.log(slog.LevelError, format, v) }
func (s serverLog) Fatalf(format string, v ...any) { s.log(slog.LevelError, format, v) }
