package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-bridge/bridge/internal/health"
)

// Timing of the outage watch of a Keeper.
const (
	// OutageHoldBack is how long a row whose stream is unavailable waits
	// before it is tried again: about a leader election (nats-server
	// server/raft.go elects within 4 to 9 s, minElectionTimeoutDefault and
	// maxElectionTimeoutDefault), tried a few times in it, never growing
	// however long the outage lasts.
	OutageHoldBack = 2 * time.Second
	// outageProbeEvery is how often the watch asks each stream it knows
	// for its info (leader and replicas).
	outageProbeEvery = 2 * time.Second
	// outageProbeTimeout bounds one stream info request.
	outageProbeTimeout = 3 * time.Second
	// outageDiagnoseFor: a publish failure is diagnosed from a stream
	// info at most this old.
	outageDiagnoseFor = time.Second
	// outageIdleClear: a stream that has a leader and quorum again, and to
	// which no publish failed for this long, is out of its outage even
	// though no publish succeeded: nothing waits for it.
	outageIdleClear = 10 * time.Second
)

// JetStream API error codes that say the cluster cannot serve the stream
// now, not that the stream or the message is wrong (nats-server
// server/jetstream_errors_generated.go).
var outageCodes = map[jetstream.ErrorCode]bool{
	10008: true, // JSClusterNotAvailErr: JetStream system temporarily unavailable
	10009: true, // JSClusterNotLeaderErr: JetStream cluster can not handle request
	10118: true, // JSStreamOfflineErr: stream is offline
	// "duplicate message id is in process": an earlier publish of the same
	// Nats-Msg-Id is still being stored (proposed to the stream's replicas,
	// slow while it lacks quorum); its outcome is not the row's fault.
	10158: true,
}

// JetStream API error codes of a PubAck that refuse every stream of the
// account or server alike (nats-server server/errors.json): not the
// message's or its stream's own refusal.
var serverWideCodes = map[jetstream.ErrorCode]bool{
	10002: true, // JSAccountResourcesExceededErr: resource limits exceeded for account
	10023: true, // JSInsufficientResourcesErr: insufficient resources
	10028: true, // JSMemoryResourcesExceededErr: insufficient memory resources available
	10047: true, // JSStorageResourcesExceededErr: insufficient storage resources available
	10120: true, // JSNoLimitsErr: no JetStream default or applicable tiered limit present
	10167: true, // JSTooManyRequests: too many requests
}

// IsOutageCode reports whether a JetStream API error code says the
// cluster cannot serve the stream now (outageCodes), or the account or
// server as a whole cannot take messages (serverWideCodes): not the
// message's or its stream's own refusal.
func IsOutageCode(code jetstream.ErrorCode) bool {
	return outageCodes[code] || serverWideCodes[code]
}

// ErrBrokerUnavailable is wrapped by every *StreamUnavailableError.
var ErrBrokerUnavailable = errors.New("the broker is unavailable")

// ErrNoStreamAnswered is wrapped by a failed publish that Keeper.Diagnose
// found is not an outage because the server answered, over a connection
// still up, that no stream captures its subject (STREAM.NAMES or
// STREAM.INFO: JetStream error 10059, stream not found). A 503 no
// responders alone does not say it: a server shutting down answers it for
// every subject while its JetStream stops (nats-server
// server/jetstream.go, shutdownJetStream), before it closes the
// connection; the API then answers 10039 (JetStream not enabled for the
// account), not 10059.
var ErrNoStreamAnswered = errors.New("the server answers that no stream captures the subject")

// noStreamAnswered is err, which the server's answer found is the
// subject's own: no stream captures it. Its text is err's.
type noStreamAnswered struct{ err error }

func (e noStreamAnswered) Error() string   { return e.err.Error() }
func (e noStreamAnswered) Unwrap() []error { return []error{ErrNoStreamAnswered, e.err} }

// StreamUnavailableError is a publish that got no PubAck because its
// stream cannot take messages now — it has no leader (an election, or no
// quorum: a majority of its replicas down), or the JetStream API does not
// answer — while the connection is up and the stream exists. It is the
// broker's outage, not the row's fault: the row waits OutageHoldBack and
// its attempt is not counted (forwarder.Classify: source.Held).
type StreamUnavailableError struct {
	// Stream is the stream that captures the subject; "" when the
	// JetStream API did not answer which one does.
	Stream string
	// Why is the server's answer in words: "no leader", "no quorum …",
	// "stream info not answered: …", "publish not acknowledged".
	Why string
	// LostLeader is the stream's last leader seen, "" when unknown.
	LostLeader string
	// Err is the publish's own error.
	Err error
}

func (e *StreamUnavailableError) Error() string {
	stream := "JetStream"
	if e.Stream != "" {
		stream = "stream " + e.Stream
	}
	lost := ""
	if e.LostLeader != "" {
		lost = " (last leader " + e.LostLeader + ")"
	}
	return fmt.Sprintf("%s unavailable: %s%s; the row waits for the broker, attempt not counted (%v)", stream, e.Why, lost, e.Err)
}

func (e *StreamUnavailableError) Unwrap() []error { return []error{ErrBrokerUnavailable, e.Err} }

// outageCandidate reports whether a failed publish may be its stream's
// outage: no PubAck came (a timeout; 503 no responders, which nats.go's
// jetstream/publish.go turns into ErrNoStreamResponse — also what a
// subject that no stream captures gets), or one of outageCodes.
func outageCandidate(err error) bool {
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrAsyncPublishTimeout) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && outageCodes[apiErr.ErrorCode]
}

// streamState is what the watch knows of one stream.
type streamState struct {
	leader  string    // last leader seen
	checked time.Time // last stream info
	why     string    // "" healthy at checked; else why it is not
	missing bool      // the server answered: no such stream

	outSince   time.Time // start of the outage; zero: none
	outWhy     string
	lostLeader string
	failedAt   time.Time // last publish diagnosed as the outage
	held       int64     // rows held in the outage
}

// streamHealth reads info: "" when the stream has a leader and a quorum of
// current replicas; otherwise why not. A replica counts when the server
// reports it current and not offline (nats-server
// server/jetstream_cluster.go, clusterInfo: a peer not heard from for
// lostQuorumInterval, 10 s, is not current).
func streamHealth(info *jetstream.StreamInfo) string {
	c := info.Cluster
	if c == nil {
		return "" // a single server: the stream is served by it
	}
	if c.Leader == "" {
		return "no leader"
	}
	peers := 1 + len(c.Replicas)
	current := 1
	for _, r := range c.Replicas {
		if r.Current && !r.Offline {
			current++
		}
	}
	if current <= peers/2 {
		return fmt.Sprintf("no quorum: %d of %d replicas current (leader %s)", current, peers, c.Leader)
	}
	return ""
}

// probe asks the server for stream's info unless it was asked within
// fresh, and records the answer. Callers hold no lock.
func (k *Keeper) probe(ctx context.Context, stream string, fresh time.Duration) streamState {
	k.mu.Lock()
	st := k.state(stream)
	if time.Since(st.checked) < fresh {
		s := *st
		k.mu.Unlock()
		return s
	}
	st.checked = time.Now() // concurrent callers use the last answer meanwhile
	k.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, outageProbeTimeout)
	defer cancel()
	s, err := k.js.Stream(ctx, stream)
	k.mu.Lock()
	defer k.mu.Unlock()
	st = k.state(stream)
	st.checked = time.Now()
	st.missing = false
	switch {
	case err == nil:
		info := s.CachedInfo()
		st.why = streamHealth(info)
		if info.Cluster != nil && info.Cluster.Leader != "" {
			st.leader = info.Cluster.Leader
		}
	case errors.Is(err, jetstream.ErrStreamNotFound):
		st.why, st.missing = "", true
	default:
		st.why = "stream info not answered: " + err.Error()
	}
	return *st
}

// state returns stream's state, made on first use; k.mu held.
func (k *Keeper) state(stream string) *streamState {
	st := k.streams[stream]
	if st == nil {
		st = &streamState{}
		k.streams[stream] = st
	}
	return st
}

// streamOf returns the stream known to capture subject: one a PubAck
// named for it, or an ensured one; "" when none is known.
func (k *Keeper) streamOf(subject string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if s, ok := k.subjects[subject]; ok {
		return s
	}
	for _, spec := range k.specs {
		if slices.ContainsFunc(spec.Subjects, func(f string) bool { return server.SubjectMatchesFilter(subject, f) }) {
			return spec.Name
		}
	}
	return ""
}

// Diagnose tells a failed publish to subject that is the broker's outage
// from one that is not, from the server's own answers: when err may be an
// outage (outageCandidate) while the connection is up, and the stream that
// captures subject exists, or the JetStream API does not answer which
// stream does, it returns a *StreamUnavailableError wrapping err and
// counts the stream in an outage (Check, Outage). When the server answers
// that no stream captures subject (jetstream.ErrStreamNotFound, from
// STREAM.NAMES or STREAM.INFO) and the connection is still up after that
// answer, it returns err wrapped with ErrNoStreamAnswered (its text
// unchanged); for every other error, err unchanged.
func (k *Keeper) Diagnose(ctx context.Context, subject string, err error) error {
	if err == nil || !outageCandidate(err) || !k.js.Conn().IsConnected() {
		return err
	}
	stream := k.streamOf(subject)
	if stream == "" {
		lctx, cancel := context.WithTimeout(ctx, outageProbeTimeout)
		name, lerr := k.js.StreamNameBySubject(lctx, subject)
		cancel()
		switch {
		case errors.Is(lerr, jetstream.ErrStreamNotFound):
			return k.noStream(err) // the server answered: no stream captures subject
		case lerr != nil:
			return &StreamUnavailableError{Why: "the JetStream API does not answer which stream captures " + subject + ": " + lerr.Error(), Err: err}
		}
		stream = name
		k.mu.Lock()
		k.subjects[subject] = name
		k.mu.Unlock()
	}
	st := k.probe(ctx, stream, outageDiagnoseFor)
	if st.missing {
		if !k.owns(stream) {
			return k.noStream(err)
		}
		// An ensured stream missing (deleted, or memory storage lost in a
		// server restart) is made again: until then its rows wait, as in
		// an outage, rather than fail one by one.
		k.Missing(ctx, subject)
		why := "ensured stream missing: being created again"
		lost := k.outage(stream, why, true)
		return &StreamUnavailableError{Stream: stream, Why: why, LostLeader: lost, Err: err}
	}
	why := st.why
	if why == "" {
		why = "publish not acknowledged"
		if st.leader != "" {
			why += " by leader " + st.leader
		}
	}
	lost := k.outage(stream, why, true)
	return &StreamUnavailableError{Stream: stream, Why: why, LostLeader: lost, Err: err}
}

// noStream is err after the server answered that no stream captures its
// subject: wrapped with ErrNoStreamAnswered when err is a 503 no
// responders and the connection is still up; unchanged otherwise. A
// timeout is not wrapped: a message may reach a stream that the account's
// STREAM.NAMES does not list (one imported from another account, a
// subject mapping), and its outcome is unknown. Nor is an answer the
// connection no longer stands behind (the server may be going).
func (k *Keeper) noStream(err error) error {
	if !errors.Is(err, jetstream.ErrNoStreamResponse) && !errors.Is(err, nats.ErrNoResponders) || !k.js.Conn().IsConnected() {
		return err
	}
	return noStreamAnswered{err}
}

// owns reports whether stream is one the keeper ensures.
func (k *Keeper) owns(stream string) bool {
	return slices.ContainsFunc(k.specs, func(s StreamSpec) bool { return s.Name == stream })
}

// outage counts stream in an outage for why (a publish failed for it when
// failed), logs its start once, and returns the leader it lost.
func (k *Keeper) outage(stream, why string, failed bool) string {
	k.mu.Lock()
	st := k.state(stream)
	start := st.outSince.IsZero()
	if start {
		st.outSince, st.lostLeader = time.Now(), st.leader
	}
	st.outWhy = why
	if failed {
		st.failedAt = time.Now()
		st.held++
	}
	lost := st.lostLeader
	k.mu.Unlock()
	if start {
		k.logger.Warn("stream unavailable: no PubAck can come, the broker is out (not a missing stream); its rows wait, attempts not counted",
			slog.String("stream", stream), slog.String("why", why), slog.String("lost_leader", lost),
			slog.Duration("retry_every", OutageHoldBack))
	}
	return lost
}

// Published is told the stream of every PubAck: a stream in an outage
// takes messages again, and subject is known to be captured by stream.
func (k *Keeper) Published(subject, stream string) {
	k.mu.Lock()
	if k.subjects[subject] != stream {
		k.subjects[subject] = stream
	}
	st := k.state(stream)
	since, held := st.outSince, st.held
	if !since.IsZero() {
		st.outSince, st.outWhy, st.held = time.Time{}, "", 0
	}
	k.mu.Unlock()
	if !since.IsZero() {
		k.logger.Info("stream takes messages again: a publish succeeded", slog.String("stream", stream),
			slog.Duration("unavailable_for", time.Since(since).Round(time.Millisecond)), slog.Int64("publishes_held", held))
	}
}

// watch probes every stream the keeper knows (ensured, or named by a
// PubAck) once: one without a leader or quorum, or whose info is not
// answered while the connection is up, is in an outage; one healthy again
// to which no publish failed for outageIdleClear leaves it.
func (k *Keeper) watch(ctx context.Context) {
	if !k.js.Conn().IsConnected() {
		return // the connection's probe says so
	}
	k.mu.Lock()
	names := make([]string, 0, len(k.streams)+len(k.specs))
	for _, spec := range k.specs {
		names = append(names, spec.Name)
	}
	for name := range k.streams {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	k.mu.Unlock()
	for _, name := range names {
		st := k.probe(ctx, name, 0)
		if ctx.Err() != nil {
			return
		}
		switch {
		case st.missing:
			k.clear(name, "the stream is missing", false)
		case st.why != "":
			k.outage(name, st.why, false)
		case !st.outSince.IsZero() && time.Since(st.failedAt) > outageIdleClear:
			k.clear(name, "leader "+st.leader+" elected, and no publish waits", true)
		}
	}
}

// clear ends stream's outage, logging why when log is set.
func (k *Keeper) clear(stream, why string, log bool) {
	k.mu.Lock()
	st := k.state(stream)
	since := st.outSince
	st.outSince, st.outWhy, st.held = time.Time{}, "", 0
	k.mu.Unlock()
	if log && !since.IsZero() {
		k.logger.Info("stream available again: "+why, slog.String("stream", stream),
			slog.Duration("unavailable_for", time.Since(since).Round(time.Millisecond)))
	}
}

// Unavailable returns the streams in an outage now, each in words ("stream
// EVENTS: no leader (last leader n2) for 12s"), sorted.
func (k *Keeper) Unavailable() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for name, st := range k.streams {
		if st.outSince.IsZero() {
			continue
		}
		s := "stream " + name + ": " + st.outWhy
		if st.lostLeader != "" {
			s += " (last leader " + st.lostLeader + ")"
		}
		out = append(out, s+" for "+time.Since(st.outSince).Round(time.Second).String()+"; waiting for a publish to succeed")
	}
	sort.Strings(out)
	return out
}

// Outage is the stall watch's view: the streams that held rows for the
// broker in an outage (in words, as Unavailable) and since when the oldest
// began; "" and the zero time when none did.
func (k *Keeper) Outage() (string, time.Time) {
	k.mu.Lock()
	var parts []string
	var since time.Time
	for name, st := range k.streams {
		if st.outSince.IsZero() || st.held == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("stream %s unavailable (%s): %d publishes held for the broker", name, st.outWhy, st.held))
		if since.IsZero() || st.outSince.Before(since) {
			since = st.outSince
		}
	}
	k.mu.Unlock()
	sort.Strings(parts)
	return strings.Join(parts, "; "), since
}

// Check is the readiness check of the streams: it fails while a stream is
// in an outage (naming it, its lost leader and how long), and is degraded
// while an ensured stream exists with other settings than configured.
func (k *Keeper) Check(ctx context.Context) error {
	if out := k.Unavailable(); len(out) > 0 {
		return errors.New(strings.Join(out, "; "))
	}
	for _, spec := range k.specs {
		if _, err := k.js.Stream(ctx, spec.Name); err != nil {
			return errors.New("stream " + spec.Name + ": " + err.Error())
		}
	}
	var drift []string
	for _, spec := range k.specs {
		if spec.Drift != "" {
			drift = append(drift, "stream "+spec.Name+" differs from its configuration: "+spec.Drift)
		}
	}
	if len(drift) > 0 {
		return health.Degraded(errors.New(strings.Join(drift, "; ")))
	}
	return nil
}
