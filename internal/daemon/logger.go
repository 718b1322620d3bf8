package daemon

import (
	"context"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill"
)

// WatermillLogger adapts logger for Watermill and watermill-sql: their
// per-message info lines become debug lines.
//
// Lines below logger's level cost nothing: Watermill's slog adapter turns
// the fields into attributes before slog checks the level, and the router
// logs twice per message at trace level (4 % of the relay's CPU in a
// bridge-bench profile).
func WatermillLogger(logger *slog.Logger) watermill.LoggerAdapter {
	logger = logger.With(slog.String("component", "watermill"))
	return leveled{
		LoggerAdapter: watermill.NewSlogLoggerWithLevelMapping(logger, map[slog.Level]slog.Level{
			slog.LevelInfo: slog.LevelDebug,
		}),
		slog: logger,
	}
}

// leveled drops Watermill's info, debug and trace lines early when the
// logger would not write them.
type leveled struct {
	watermill.LoggerAdapter
	slog *slog.Logger
}

func (l leveled) enabled(level slog.Level) bool { return l.slog.Enabled(context.Background(), level) }

func (l leveled) Info(msg string, fields watermill.LogFields) {
	if l.enabled(slog.LevelDebug) {
		l.LoggerAdapter.Info(msg, fields)
	}
}

func (l leveled) Debug(msg string, fields watermill.LogFields) {
	if l.enabled(slog.LevelDebug) {
		l.LoggerAdapter.Debug(msg, fields)
	}
}

func (l leveled) Trace(msg string, fields watermill.LogFields) {
	if l.enabled(watermill.LevelTrace) {
		l.LoggerAdapter.Trace(msg, fields)
	}
}

func (l leveled) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return leveled{LoggerAdapter: l.LoggerAdapter.With(fields), slog: l.slog}
}

// LogStreams says, when the relay ensures no stream, where its messages
// go: to the streams the server already has. An operator who forgot
// --ensure-stream learns it here rather than from publish retries.
func LogStreams(logger *slog.Logger, ensured []string) {
	if len(ensured) == 0 {
		logger.Info("no stream to ensure (streams / --ensure-stream): publishing to the streams already on the server; a row whose subject no stream captures is retried with backoff, then dead-lettered")
	}
}
