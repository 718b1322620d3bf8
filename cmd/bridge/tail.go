package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	bridge "github.com/outbox-bridge/bridge"
	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/secret"
)

func newTailCommand() *cobra.Command {
	var (
		subject string
		all     bool
		asJSON  bool
		wait    bool
	)
	cmd := &cobra.Command{
		Use:   "tail --subject S [--all] [--json] [--wait]",
		Short: "Print messages arriving on the stream, with their headers",
		Long: `Print the messages that arrive on the stream holding --subject (wildcards allowed),
with their headers, until interrupted. With --all, start at the stream's first
message instead of the next one. Uses an ordered consumer: nothing is acked or
changed on the stream. The first line on stderr names the server it connected to.

When no NATS server answers or no stream captures --subject yet, tail exits 1;
with --wait it waits until one does (bridge run starts the embedded server and
creates its streams when it starts).`,
		Example: `  bridge tail --subject 'events.>'
  bridge tail --subject events.order.created --all --json
  bridge tail --subject 'events.>' --wait   # started before bridge run`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// nats-server's own rule for a subscription subject.
			if !server.IsValidSubject(subject) {
				return usage("--subject %q is not a valid subject: dot-separated tokens without whitespace, where * stands for one token and a final > for the rest (events.>, events.*.created)", subject)
			}
			ctx, cfg, logger, err := setup(cmd, false)
			if err != nil {
				return err
			}
			if err := cfg.CheckFiles(); err != nil {
				return usageError{err}
			}
			js, cleanup, err := connectTail(ctx, cfg, logger, wait, cmd.ErrOrStderr())
			if err != nil {
				if ctx.Err() != nil {
					return nil // interrupted while waiting
				}
				return classify(err)
			}
			defer cleanup()
			nc := js.Conn()
			fmt.Fprintf(cmd.ErrOrStderr(), "connected to %s (server %s, nats-server %s)\n",
				// Not ConnectedUrlRedacted: it leaves a token in the URL.
				secret.RedactNATSURLs(nc.ConnectedUrl()), nc.ConnectedServerName(), nc.ConnectedServerVersion())
			streamName, err := streamFor(ctx, js, subject, wait, cmd.ErrOrStderr())
			if err != nil {
				if ctx.Err() != nil {
					return nil // interrupted while waiting
				}
				return err
			}
			stream, err := js.Stream(ctx, streamName)
			if err != nil {
				return fmt.Errorf("stream %s: %w", streamName, err)
			}
			policy := jetstream.DeliverNewPolicy
			if all {
				policy = jetstream.DeliverAllPolicy
			}
			cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
				FilterSubjects: []string{subject}, DeliverPolicy: policy,
			})
			if err != nil {
				return fmt.Errorf("consume stream %s: %w", streamName, err)
			}
			if !asJSON {
				fmt.Fprintf(cmd.ErrOrStderr(), "tailing %s on stream %s (Ctrl-C to stop)\n", subject, streamName)
			}
			out := cmd.OutOrStdout()
			cc, err := cons.Consume(func(m jetstream.Msg) {
				if asJSON {
					printJSON(out, m)
				} else {
					printText(out, m)
				}
			})
			if err != nil {
				return fmt.Errorf("consume stream %s: %w", streamName, err)
			}
			<-ctx.Done()
			cc.Stop()
			return nil
		},
	}
	cmd.Flags().StringVar(&subject, "subject", "", "`subject` to follow; wildcards * and > allowed (required)")
	cmd.Flags().BoolVar(&all, "all", false, "start at the first message of the stream")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per message")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for the NATS server and for a stream that captures --subject instead of exiting")
	_ = cmd.MarkFlagRequired("subject")
	return cmd
}

// connectTail connects to what bridge run publishes to. Without a server
// there it fails, or with wait tries again every tailWaitInterval until one
// answers or ctx ends, saying once on stderr that it waits.
func connectTail(ctx context.Context, cfg *config.Config, logger *slog.Logger, wait bool, stderr io.Writer) (jetstream.JetStream, func(), error) {
	said := false
	for {
		js, cleanup, err := bridge.NewJetStream(ctx, cfg, logger)
		if err == nil || !wait || !errors.Is(err, nats.ErrNoServers) {
			return js, cleanup, err
		}
		if !said {
			fmt.Fprintf(stderr, "%s; waiting for it (--wait)\n", err)
			said = true
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(tailWaitInterval):
		}
	}
}

// tailWaitInterval is how often tail --wait asks for the server or the
// stream again.
const tailWaitInterval = time.Second

// streamFor returns the name of the stream that captures subject. Without
// one it fails, or with wait asks again every tailWaitInterval until one
// appears or ctx ends, saying once on stderr that it waits.
func streamFor(ctx context.Context, js jetstream.JetStream, subject string, wait bool, stderr io.Writer) (string, error) {
	said := false
	for {
		name, err := js.StreamNameBySubject(ctx, subject)
		if err == nil {
			return name, nil
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return "", fmt.Errorf("find the stream for subject %s: %w", subject, err)
		}
		if !wait {
			return "", fmt.Errorf("no stream captures subject %s: %w (bridge run creates its streams when it starts; tail --wait waits for one; "+
				"is this the server bridge run publishes to? tail reads the one --nats-url or --nats-listen names)", subject, err)
		}
		if !said {
			fmt.Fprintf(stderr, "no stream captures %s yet; waiting for one (--wait)\n", subject)
			said = true
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(tailWaitInterval):
		}
	}
}

func printText(w io.Writer, m jetstream.Msg) {
	meta, _ := m.Metadata()
	fmt.Fprintf(w, "--- %s #%d  %s  %s\n", meta.Stream, meta.Sequence.Stream, m.Subject(), meta.Timestamp.UTC().Format(time.RFC3339Nano))
	h := m.Headers()
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		for _, v := range h[name] {
			fmt.Fprintf(w, "%s: %s\n", name, v)
		}
	}
	fmt.Fprintln(w)
	if printable(m.Data()) {
		fmt.Fprintf(w, "%s\n\n", m.Data())
	} else {
		fmt.Fprintf(w, "(%d bytes of binary data; --json shows them in base64)\n\n", len(m.Data()))
	}
}

func printJSON(w io.Writer, m jetstream.Msg) {
	meta, _ := m.Metadata()
	doc := map[string]any{
		"stream": meta.Stream, "seq": meta.Sequence.Stream, "subject": m.Subject(),
		"time": meta.Timestamp.UTC().Format(time.RFC3339Nano), "headers": m.Headers(),
	}
	if utf8.Valid(m.Data()) {
		doc["data"] = string(m.Data())
	} else {
		doc["data_base64"] = m.Data()
	}
	b, _ := json.Marshal(doc)
	fmt.Fprintf(w, "%s\n", b)
}

func printable(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if !unicode.IsPrint(r) && !unicode.IsSpace(r) {
			return false
		}
	}
	return true
}
