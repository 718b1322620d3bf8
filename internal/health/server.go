package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check is one readiness check; a nil error means ready.
type Check struct {
	Name  string
	Check func(ctx context.Context) error
}

// Server serves /healthz, /readyz and /metrics.
type Server struct {
	listener net.Listener
	srv      *http.Server
	checks   []Check
	draining atomic.Bool
	logger   *slog.Logger
}

// Listen binds addr (host:port; port 0 picks a free one) and returns a
// Server that serves gatherer's metrics once Serve runs. Errors: the
// listen error, naming the address.
func Listen(addr string, gatherer prometheus.Gatherer, checks []Check, logger *slog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http.listen %s: %w; choose a free address with --http-listen (BRIDGE_HTTP_LISTEN)", addr, err)
	}
	s := &Server{listener: ln, checks: checks, logger: logger}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", s.ready)
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	// Go's profiler, for finding where time goes (go tool pprof
	// http://127.0.0.1:PORT/debug/pprof/profile). Loopback clients only
	// (kubectl port-forward arrives as one): a profile costs CPU and a
	// goroutine dump shows internals.
	mux.HandleFunc("/debug/pprof/", loopbackOnly(pprof.Index))
	mux.HandleFunc("/debug/pprof/profile", loopbackOnly(pprof.Profile))
	mux.HandleFunc("/debug/pprof/trace", loopbackOnly(pprof.Trace))
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	return s, nil
}

// Addr is the bound address.
func (s *Server) Addr() string { return s.listener.Addr().String() }

// SetDraining makes /readyz answer 503 from now on.
func (s *Server) SetDraining() { s.draining.Store(true) }

// Serve serves until ctx ends, then shuts down within 2 s.
func (s *Server) Serve(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.listener) }()
	select {
	case err := <-errc:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		err := s.srv.Shutdown(shutdownCtx)
		if e := <-errc; !errors.Is(e, http.ErrServerClosed) {
			err = errors.Join(err, e)
		}
		return err
	}
}

func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	result := map[string]string{}
	ok := true
	if s.draining.Load() {
		result["relay"], ok = "draining", false
	}
	for _, c := range s.checks {
		if err := c.Check(ctx); err != nil {
			result[c.Name], ok = err.Error(), false
		} else {
			result[c.Name] = "ok"
		}
	}
	w.Header().Set("Content-Type", "application/json")
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(result)
}

// loopbackOnly answers 403 to clients that are not on the loopback
// interface.
func loopbackOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			http.Error(w, "/debug/pprof is served to loopback clients only", http.StatusForbidden)
			return
		}
		h(w, r)
	}
}
