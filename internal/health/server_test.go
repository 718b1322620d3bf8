package health

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

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
