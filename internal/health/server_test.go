package health

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// bridge_ready follows what /readyz answers: 0 while no relay runs, 1
// while every check of the running relay passes, 0 when one fails or the
// relay drains.
func TestReadyGauge(t *testing.T) {
	s, err := Listen("127.0.0.1:0", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.listener.Close() })
	g := s.readyCollector()
	if v := testutil.ToFloat64(g); v != 0 {
		t.Errorf("bridge_ready = %v while starting, want 0", v)
	}
	var dbErr error
	s.Running(&Probes{Ready: []Check{{Name: "database", Check: func(context.Context) error { return dbErr }}}})
	if v := testutil.ToFloat64(g); v != 1 {
		t.Errorf("bridge_ready = %v with every check passing, want 1", v)
	}
	dbErr = errors.New("down")
	if v := testutil.ToFloat64(g); v != 0 {
		t.Errorf("bridge_ready = %v with the database check failing, want 0", v)
	}
	dbErr = nil
	s.Waiting(errors.New("database unreachable"))
	if v := testutil.ToFloat64(g); v != 0 {
		t.Errorf("bridge_ready = %v while waiting for a dependency, want 0", v)
	}
	s.Running(&Probes{Ready: []Check{{Name: "database", Check: func(context.Context) error { return dbErr }}}})
	s.SetDraining()
	if v := testutil.ToFloat64(g); v != 0 {
		t.Errorf("bridge_ready = %v while draining, want 0", v)
	}
}

// /metrics has bridge_ready and bridge_build_info whether a relay runs or
// not, beside the relay's own metrics (which include the Go collector the
// server also serves while no relay runs).
func TestOwnMetricsAlwaysServed(t *testing.T) {
	s, err := Listen("127.0.0.1:0", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.listener.Close() })
	scrape := func() string {
		rec := httptest.NewRecorder()
		s.srv.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("/metrics: %d\n%s", rec.Code, rec.Body)
		}
		return rec.Body.String()
	}
	for _, want := range []string{"\nbridge_ready 0\n", "\nbridge_build_info{", "\ngo_goroutines "} {
		if body := scrape(); !strings.Contains(body, want) {
			t.Errorf("/metrics while no relay runs lacks %q", strings.TrimSpace(want))
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), prometheus.NewGauge(prometheus.GaugeOpts{Name: "bridge_relay_metric"}))
	s.Running(&Probes{Gatherer: reg})
	body := scrape()
	for _, want := range []string{"\nbridge_ready 1\n", "\nbridge_build_info{", "\ngo_goroutines ", "\nbridge_relay_metric 0\n"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics of a running relay lacks %q", strings.TrimSpace(want))
		}
	}
}

// TestEachCheckHasItsOwnBudget: a check that uses its whole budget (a
// database that does not answer) does not make the others fail for want
// of time; /readyz still answers within about one budget, naming only the
// slow check.
func TestEachCheckHasItsOwnBudget(t *testing.T) {
	s, err := Listen("127.0.0.1:0", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.listener.Close() })
	never := make(chan struct{})
	t.Cleanup(func() { close(never) })
	s.Running(&Probes{Ready: []Check{
		{Name: "database", Check: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
		{Name: "streams", Check: func(ctx context.Context) error { return ctx.Err() }},
		{Name: "stuck", Check: func(context.Context) error { <-never; return nil }},
	}})
	result, ok := s.ready(context.Background())
	if ok {
		t.Fatalf("ready with a check failing: %v", result)
	}
	if result["streams"] != "ok" {
		t.Errorf("streams = %q: a slow check took the time of the others", result["streams"])
	}
	if !strings.Contains(result["database"], "deadline exceeded") {
		t.Errorf("database = %q, want its deadline", result["database"])
	}
	if !strings.Contains(result["stuck"], "no answer within") {
		t.Errorf("stuck = %q, want no answer within the budget", result["stuck"])
	}
}
