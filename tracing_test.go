package bridge_test

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	bridge "github.com/outbox-bridge/bridge"
	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/config"
	"github.com/outbox-bridge/bridge/internal/outbox"
	"github.com/outbox-bridge/bridge/internal/source"
	"github.com/outbox-bridge/bridge/internal/source/table"
)

// otlpReceiver is a minimal OTLP/HTTP trace endpoint that keeps the spans
// it is sent.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil || req.URL.Path != "/v1/traces" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	var export collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &export); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range export.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			r.spans = append(r.spans, ss.Spans...)
		}
	}
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

// TestTraceContextAndSpans: a row's traceparent reaches the stream
// unchanged, and with OTEL_EXPORTER_OTLP_ENDPOINT set the relay exports its
// claim and publish spans as children of the row's span.
func TestTraceContextAndSpans(t *testing.T) {
	receiver := &otlpReceiver{}
	collector := httptest.NewServer(receiver)
	t.Cleanup(collector.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")

	ctx := context.Background()
	n := bridgetest.StartNATS(t)
	_, js := n.JetStream(t)
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.NATS.URL = n.URL()
	cfg.Streams = []config.Stream{{Name: "EVENTS", Subjects: []string{"events.>"}, Duplicates: time.Minute, Replicas: 1, Storage: "file"}}
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.Relay.PollInterval = 10 * time.Millisecond
	require.NoError(t, cfg.Validate())
	relay, cleanup := newRelay(t, &cfg)
	moved := source.NewTestSignal[int]()
	bridge.Moved(relay, moved)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()

	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	traceparent := "00-" + traceID + "-" + parentID + "-01"
	_, err := relay.Source.(*table.Source).Store.Enqueue(ctx, outbox.Entry{IdempotencyKey: "traced", Subject: "events.t", Payload: []byte("x"),
		Headers: []byte(`{"traceparent": "` + traceparent + `", "tracestate": "vendor=1"}`)})
	require.NoError(t, err)
	_, err = relay.Source.(*table.Source).Store.Enqueue(ctx, outbox.Entry{IdempotencyKey: "untraced", Subject: "events.t", Payload: []byte("y")})
	require.NoError(t, err)
	moved.WaitUntil(t, func() bool {
		st, err := relay.Source.(*table.Source).Store.Stats(ctx, 0)
		require.NoError(t, err)
		return st.Rows[outbox.StatusDone] == 2
	})
	stop()
	require.NoError(t, <-done)
	cleanup() // flushes the spans

	msgs := bridgetest.Messages(t, js, "EVENTS")
	require.Len(t, msgs, 2)
	for _, m := range msgs { // rows without an ordering key may arrive in any order
		if m.Headers().Get("Outbox-Idempotency-Key") == "traced" {
			require.Equal(t, traceparent, m.Headers().Get("traceparent"))
			require.Equal(t, "vendor=1", m.Headers().Get("tracestate"))
		} else {
			require.Empty(t, m.Headers().Get("traceparent"))
		}
	}

	receiver.mu.Lock()
	defer receiver.mu.Unlock()
	names := map[string]bool{}
	for _, s := range receiver.spans {
		require.Equal(t, traceID, hex.EncodeToString(s.TraceId), "span %s belongs to the row's trace", s.Name)
		require.Equal(t, parentID, hex.EncodeToString(s.ParentSpanId), "span %s is a child of the row's span", s.Name)
		names[s.Name] = true
	}
	require.Equal(t, map[string]bool{"outbox claim": true, "publish events.t": true}, names, "only the traced row has spans")
}
