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
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/outbox-bridge/bridge/internal/buildinfo"
)

// Check is one probe; a nil error means ok. An error made by Degraded is
// shown but does not fail the probe.
type Check struct {
	Name  string
	Check func(ctx context.Context) error
}

// Degraded marks the result of a check as a partial fault: /readyz names it
// under the check's name and still answers 200. For a fault confined to
// some rows (an unsafe stream whose rows are held back) while the relay
// relays the others: failing readiness would not help them, and would stop
// a rolling update (a new replica that never becomes ready) that may bring
// the fix.
func Degraded(err error) error {
	if err == nil {
		return nil
	}
	return degraded{err}
}

// IsDegraded reports whether err is (or wraps) one made by Degraded.
func IsDegraded(err error) bool {
	var d degraded
	return errors.As(err, &d)
}

type degraded struct{ err error }

func (d degraded) Error() string { return d.err.Error() }
func (d degraded) Unwrap() error { return d.err }

// Probes are what a running relay reports: its metrics, its readiness
// checks (/readyz) and its liveness checks (/healthz).
type Probes struct {
	Gatherer prometheus.Gatherer
	Ready    []Check
	Alive    []Check
}

// state is what the server reports: a running relay's probes, or why
// there is none.
type state struct {
	probes  *Probes
	metrics http.Handler
	// waiting says why no relay runs yet (dependencies unavailable); dead,
	// that the process is not healthy (/healthz fails) until a relay runs
	// again.
	waiting, dead error
}

// Server serves /healthz, /readyz and /metrics. It is bound before the
// relay is built, so that a relay waiting for its database or NATS answers
// its probes: /healthz 200 and /readyz 503 naming what it waits for.
//
// /metrics always has the server's own gauges, bridge_ready (1 when
// /readyz answers 200) and bridge_build_info; with them the Go runtime and
// process before a relay ran, and the running (or, between two relays, the
// last) relay's metrics otherwise.
type Server struct {
	listener net.Listener
	srv      *http.Server
	mux      *http.ServeMux
	draining atomic.Bool
	state    atomic.Pointer[state]
	own      *prometheus.Registry // bridge_ready, bridge_build_info
	base     http.Handler         // /metrics before a relay ran: own, the Go runtime and process
	logger   *slog.Logger
	// unhealthy fails /healthz until its time, whatever the state.
	unhealthy atomic.Pointer[until]
}

// until is a reason that holds until a time.
type until struct {
	why error
	at  time.Time
}

// Listen binds addr (host:port; port 0 picks a free one) and returns a
// Server that answers once Serve runs: /readyz 503 {"relay": "starting"}
// until Running. Errors: the listen error, naming the address.
func Listen(addr string, logger *slog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http.listen %s: %w; choose a free address with --http-listen (BRIDGE_HTTP_LISTEN)", addr, err)
	}
	s := &Server{listener: ln, logger: logger, own: prometheus.NewRegistry()}
	s.own.MustRegister(s.readyCollector(), buildinfo.Read().Collector())
	base := prometheus.NewRegistry()
	base.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.base = promhttp.HandlerFor(prometheus.Gatherers{s.own, base}, promhttp.HandlerOpts{})
	s.state.Store(&state{waiting: errors.New("starting")})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		if m := s.state.Load().metrics; m != nil {
			m.ServeHTTP(w, r)
			return
		}
		s.base.ServeHTTP(w, r)
	})
	// Go's profiler, for finding where time goes (go tool pprof
	// http://127.0.0.1:PORT/debug/pprof/profile). Loopback clients only
	// (kubectl port-forward arrives as one): a profile costs CPU and a
	// goroutine dump shows internals.
	mux.HandleFunc("/debug/pprof/", loopbackOnly(pprof.Index))
	mux.HandleFunc("/debug/pprof/profile", loopbackOnly(pprof.Profile))
	mux.HandleFunc("/debug/pprof/trace", loopbackOnly(pprof.Trace))
	s.mux = mux
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	return s, nil
}

// Handle serves h at pattern (http.ServeMux's patterns) beside the probes,
// such as the console at /ui/.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// Ready runs the readiness checks as /readyz does: each result by name, and
// whether /readyz answers 200.
func (s *Server) Ready(ctx context.Context) (map[string]string, bool) { return s.ready(ctx) }

// Addr is the bound address.
func (s *Server) Addr() string { return s.listener.Addr().String() }

// SetDraining makes /readyz answer 503 from now on.
func (s *Server) SetDraining() { s.draining.Store(true) }

// Running reports p from now on: a relay runs.
func (s *Server) Running(p *Probes) {
	var m http.Handler
	if p.Gatherer != nil {
		m = promhttp.HandlerFor(prometheus.Gatherers{s.own, p.Gatherer}, promhttp.HandlerOpts{})
	}
	s.state.Store(&state{probes: p, metrics: m})
}

// Waiting reports that no relay runs because of why (a dependency that
// cannot be reached): /readyz answers 503 naming it, /healthz 200 — the
// process is alive and retrying, and a restart would not help. /metrics
// keeps serving the last relay's metrics, whose counters and gauges keep
// their last values.
func (s *Server) Waiting(why error) {
	s.state.Store(&state{waiting: why, metrics: s.state.Load().metrics})
}

// Dead reports that no relay runs because of why, a state the process must
// not sit in (its NATS connection was closed for good): /healthz and
// /readyz answer 503 until Running, so that an orchestrator restarts the
// process should it not heal. /metrics as with Waiting.
func (s *Server) Dead(why error) {
	s.state.Store(&state{waiting: why, dead: why, metrics: s.state.Load().metrics})
}

// UnhealthyUntil makes /healthz answer 503 naming why until the time at,
// whatever the relay does meanwhile: a process that keeps failing and
// healing (its NATS connection closed for good again and again) is not
// healthy although each new relay runs.
func (s *Server) UnhealthyUntil(why error, at time.Time) {
	s.unhealthy.Store(&until{why: why, at: at})
}

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

// healthz answers 200 "ok" unless the process is dead or a liveness check
// fails; then 503 with a JSON object naming why.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	st := s.state.Load()
	bad := s.unhealthy.Load()
	if bad != nil && !time.Now().Before(bad.at) {
		bad = nil
	}
	if st.dead == nil && bad == nil && (st.probes == nil || len(st.probes.Alive) == 0) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
		return
	}
	result, ok := map[string]string{}, true
	if st.dead != nil {
		result["relay"], ok = st.dead.Error(), false
	}
	if bad != nil {
		result["heals"], ok = bad.why.Error(), false
	}
	if st.probes != nil && !s.run(r.Context(), st.probes.Alive, result) {
		ok = false
	}
	if ok {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
		return
	}
	s.answer(w, result, ok)
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	result, ok := s.ready(r.Context())
	s.answer(w, result, ok)
}

// ready runs the readiness checks of the current state: each result under
// its name, and whether /readyz answers 200.
func (s *Server) ready(ctx context.Context) (map[string]string, bool) {
	st := s.state.Load()
	result, ok := map[string]string{}, true
	if s.draining.Load() {
		result["relay"], ok = "draining", false
	}
	switch {
	case st.probes != nil:
		if !s.run(ctx, st.probes.Ready, result) {
			ok = false
		}
	case st.waiting != nil:
		if _, set := result["relay"]; !set {
			result["relay"] = "not running: " + st.waiting.Error()
		}
		ok = false
	}
	return result, ok
}

// readyCollector is the gauge bridge_ready: 1 when /readyz would answer
// 200, 0 otherwise (starting, waiting for a dependency, a check failing,
// draining). The checks run at each scrape, bounded as for /readyz, so an
// alert on it sees what the kubelet's readiness probe sees.
func (s *Server) readyCollector() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bridge_ready",
		Help: "1 when /readyz answers 200 (a relay runs, its database accepts writes, NATS is connected, its streams exist, it is not draining), else 0."},
		func() float64 {
			if _, ok := s.ready(context.Background()); ok {
				return 1
			}
			return 0
		})
}

// checkTimeout is the budget of each check of a probe.
const checkTimeout = 2 * time.Second

// run runs checks at once, each with its own budget of checkTimeout (a
// slow database does not eat the time of the NATS checks), records each
// result in result, and reports whether none failed (a Degraded result
// does not fail). It answers within checkTimeout: a check that has not
// returned by then is recorded as timed out.
func (s *Server) run(ctx context.Context, checks []Check, result map[string]string) bool {
	errs := make([]chan error, len(checks))
	for i, c := range checks {
		errs[i] = make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(ctx, checkTimeout)
			defer cancel()
			errs[i] <- c.Check(ctx)
		}()
	}
	deadline := time.NewTimer(checkTimeout + 100*time.Millisecond)
	defer deadline.Stop()
	ok, expired := true, false
	for i, c := range checks {
		var err error
		if !expired {
			select {
			case err = <-errs[i]:
			case <-deadline.C:
				expired = true
			}
		}
		if expired {
			select {
			case err = <-errs[i]:
			default:
				err = fmt.Errorf("no answer within %s", checkTimeout)
			}
		}
		var d degraded
		switch {
		case err == nil:
			result[c.Name] = "ok"
		case errors.As(err, &d):
			result[c.Name] = "degraded: " + err.Error()
		default:
			result[c.Name], ok = err.Error(), false
		}
	}
	return ok
}

func (s *Server) answer(w http.ResponseWriter, result map[string]string, ok bool) {
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
