package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	bridge "github.com/outbox-bridge/bridge"
	"github.com/outbox-bridge/bridge/internal/broker"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

func newEnqueueCommand() *cobra.Command {
	var (
		subject, key, orderingKey, data, dataFile string
		headers                                   []string
	)
	cmd := &cobra.Command{
		Use:   "enqueue --subject S [--key K] [--ordering-key O] [--header K=V]... [--data D | --data-file F]",
		Short: "Insert one outbox row (for trying things and for operators)",
		Long: `Insert one row into the outbox table, in its own transaction. Services insert
their rows in their own business transaction instead (see docs/PRODUCERS.md).

The idempotency key defaults to a new UUIDv7. A key already in the table is not
inserted again: the command says "already enqueued" and exits 0.

With the embedded NATS server (nats.url embedded) a payload that cannot fit its
max_payload (1 MiB) with the message's headers is refused (exit 2). With an
external server the limit is not known here; the relay makes such a row a dead
letter, from the payload's length.`,
		Example: `  bridge enqueue --subject events.demo --data hello
  bridge enqueue --subject events.order.created --key order-42 --ordering-key order-42 \
      --header Content-Type=application/json --data '{"id":42}'`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("data") && dataFile != "" {
				return usage("--data and --data-file are exclusive; give one")
			}
			if err := outbox.CheckSubject(subject); err != nil {
				return usage("--subject: %w", err)
			}
			if !utf8.ValidString(subject) {
				// PostgreSQL and MySQL refuse it; the producer package too.
				return usage("--subject %q is not valid UTF-8", subject)
			}
			hdr, err := headerJSON(headers)
			if err != nil {
				return err
			}
			payload := []byte(data)
			if dataFile != "" {
				if payload, err = os.ReadFile(dataFile); err != nil {
					return usage("--data-file: %w", err)
				}
			}
			if cmd.Flags().Changed("key") && key == "" {
				return usage("--key is empty; give a key, or leave the flag out for a new UUIDv7")
			}
			if cmd.Flags().Changed("ordering-key") && orderingKey == "" {
				return usage("--ordering-key is empty; give a key, or leave the flag out for a row without ordering")
			}
			if err := outbox.CheckIdempotencyKey("--key", key); err != nil {
				return usage("%w", err)
			}
			if err := outbox.CheckKey("--ordering-key", orderingKey); err != nil {
				return usage("%w", err)
			}
			if key == "" {
				id, err := uuid.NewV7()
				if err != nil {
					return err
				}
				key = id.String()
			}
			ctx, cfg, logger, err := setup(cmd, false)
			if err != nil {
				return err
			}
			if err := requireExplicitSQLiteOutbox(cfg); err != nil {
				return err
			}
			if err := requireNamedEmbeddedTable(ctx, cfg, logger); err != nil {
				return err
			}
			store, cleanup, err := bridge.NewStore(ctx, cfg, logger)
			if err != nil {
				return classify(err)
			}
			defer cleanup()
			var maxPayload int64
			if cfg.EmbeddedNATS() {
				maxPayload = broker.EmbeddedMaxPayload
			}
			id, err := store.Enqueue(ctx, outbox.Entry{
				IdempotencyKey: key, Subject: subject, Payload: payload, Headers: hdr, OrderingKey: orderingKey,
				MaxPayload: maxPayload,
			})
			if errors.Is(err, outbox.ErrAlreadyEnqueued) {
				fmt.Fprintf(cmd.OutOrStdout(), "already enqueued: key %q is in %s\n", key, store.Table())
				return nil
			}
			if err != nil {
				return classify(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "enqueued row %d into %s in %s: subject %s, key %.80q, %d bytes\n",
				id, store.Table(), store.DB().Redacted, subject, key, len(payload))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&subject, "subject", "", "NATS `subject` to publish to, no wildcards (required)")
	f.StringVar(&key, "key", "", "idempotency `key`, source of Nats-Msg-Id (default a new UUIDv7)")
	f.StringVar(&orderingKey, "ordering-key", "", "rows with the same `key` are published in insertion order")
	f.StringArrayVar(&headers, "header", nil, "header `NAME=VALUE`; repeatable, a repeated name gets several values")
	f.StringVar(&data, "data", "", "message body `text`")
	f.StringVar(&dataFile, "data-file", "", "read the message body from `file`")
	_ = cmd.MarkFlagRequired("subject")
	return cmd
}

// headerJSON turns NAME=VALUE flags into the headers column's JSON.
func headerJSON(flags []string) ([]byte, error) {
	if len(flags) == 0 {
		return nil, nil
	}
	h := map[string][]string{}
	for _, f := range flags {
		name, value, ok := strings.Cut(f, "=")
		if !ok || name == "" {
			return nil, usage("--header %q: expected NAME=VALUE", f)
		}
		if !utf8.ValidString(value) {
			// JSON would replace the bad bytes with U+FFFD: refuse rather
			// than publish something else than was given.
			return nil, usage("--header %q: the value is not valid UTF-8", f)
		}
		h[name] = append(h[name], value)
	}
	out, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	if _, err := outbox.ParseHeaders(out); err != nil {
		return nil, usage("--header: %w", err)
	}
	return out, nil
}
