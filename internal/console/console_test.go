package console_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
	"github.com/outbox-bridge/bridge/internal/console"
	"github.com/outbox-bridge/bridge/internal/outbox"
)

const token = "console-unit-test-token-01234"

type setup struct {
	srv   *httptest.Server
	store *outbox.Store
	log   *strings.Builder
}

func newSetup(t *testing.T, cfg console.Config) setup {
	t.Helper()
	_, table, store := bridgetest.Outbox(t, "sqlite")
	cfg.Table = table
	var log strings.Builder
	c, err := console.New(cfg, func(context.Context) (*outbox.Store, func(), error) { return store, func() {}, nil },
		func(context.Context) (map[string]string, bool) { return map[string]string{"nats": "ok"}, true },
		slog.New(slog.NewJSONHandler(&syncWriter{b: &log}, nil)))
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/ui/", c)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return setup{srv: srv, store: store, log: &log}
}

type syncWriter struct{ b *strings.Builder }

func (w *syncWriter) Write(p []byte) (int, error) { return w.b.Write(p) }

// deadLetter enqueues a row and makes it a dead letter.
func deadLetter(t *testing.T, store *outbox.Store, key string) int64 {
	t.Helper()
	ctx := context.Background()
	id, err := store.Enqueue(ctx, outbox.Entry{IdempotencyKey: key, Subject: "events." + key, Payload: []byte{0, 1, 2}})
	require.NoError(t, err)
	rows, err := store.Claim(ctx, "test", 10)
	require.NoError(t, err)
	for _, r := range rows {
		if r.ID == id {
			_, err = store.MarkFailed(ctx, "test", []outbox.Failure{{ID: id, Attempt: r.Attempt, Err: "broken", Permanent: true}})
			require.NoError(t, err)
			return id
		}
	}
	t.Fatalf("row %d was not claimed", id)
	return 0
}

func noRedirect() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func statusOf(t *testing.T, store *outbox.Store, id int64) outbox.Status {
	t.Helper()
	st, ok, err := store.StatusOf(context.Background(), id)
	require.NoError(t, err)
	require.True(t, ok)
	return st
}

func post(t *testing.T, c *http.Client, u string, form url.Values, header ...string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// A signed-in browser acts only with its session's CSRF token; a bearer
// token acts without one (it is no ambient credential); a wrong token acts
// on nothing; every action is logged, the token never.
func TestActionsNeedTokenAndCSRF(t *testing.T) {
	s := newSetup(t, console.Config{Token: token, InflightTimeout: time.Minute})
	id := deadLetter(t, s.store, "a")
	c := noRedirect()

	code, _ := get(t, c, s.srv.URL+"/ui/rows")
	require.Equal(t, http.StatusSeeOther, code, "reading without the token")
	require.Equal(t, http.StatusUnauthorized, post(t, c, s.srv.URL+"/ui/login", url.Values{"token": {"wrong-wrong-wrong-wrong"}}))
	require.Equal(t, http.StatusSeeOther, post(t, c, s.srv.URL+"/ui/login", url.Values{"token": {token}, "next": {"//evil.example/"}}))

	code, page := get(t, c, s.srv.URL+"/ui/rows?status=permanent_failed")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, "events.a")
	csrf := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(page)
	require.NotNil(t, csrf, "no CSRF token in the page")

	require.Equal(t, http.StatusForbidden, post(t, c, s.srv.URL+"/ui/actions/retry", url.Values{"id": {"1"}}), "a signed-in post without the CSRF token")
	require.Equal(t, http.StatusForbidden, post(t, c, s.srv.URL+"/ui/actions/retry", url.Values{"id": {"1"}, "csrf": {strings.Repeat("0", 64)}}))
	require.Equal(t, outbox.StatusPermanentFailed, statusOf(t, s.store, id))

	require.Equal(t, http.StatusSeeOther, post(t, c, s.srv.URL+"/ui/actions/retry", url.Values{"id": {"1"}, "csrf": {csrf[1]}}))
	require.Equal(t, outbox.StatusPending, statusOf(t, s.store, id))

	id2 := deadLetter(t, s.store, "b")
	plain := noRedirect()
	require.Equal(t, http.StatusUnauthorized, post(t, plain, s.srv.URL+"/ui/actions/retry", url.Values{"id": {"2"}}, "Authorization", "Bearer nope-nope-nope-nope"))
	require.Equal(t, outbox.StatusPermanentFailed, statusOf(t, s.store, id2))
	require.Equal(t, http.StatusSeeOther, post(t, plain, s.srv.URL+"/ui/actions/retry", url.Values{"id": {"2"}}, "Authorization", "Bearer "+token))
	require.Equal(t, outbox.StatusPending, statusOf(t, s.store, id2))
	require.Equal(t, http.StatusBadRequest, post(t, plain, s.srv.URL+"/ui/actions/retry", url.Values{"id": {"x"}}, "Authorization", "Bearer "+token))
	require.Equal(t, http.StatusNotFound, post(t, plain, s.srv.URL+"/ui/actions/drop", nil, "Authorization", "Bearer "+token))

	require.Contains(t, s.log.String(), `"msg":"console action"`)
	require.NotContains(t, s.log.String(), token, "the token is logged")
}

// read_only_without_token: anyone reads, nobody without the token acts.
// A console without a token has no actions at all.
func TestReadOnlyWithoutToken(t *testing.T) {
	for _, cfg := range []console.Config{{Token: token, ReadOnlyWithoutToken: true}, {ReadOnlyWithoutToken: true}} {
		s := newSetup(t, cfg)
		id := deadLetter(t, s.store, "a")
		c := noRedirect()
		code, page := get(t, c, s.srv.URL+"/ui/rows")
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, page, "events.a")
		require.NotContains(t, page, `id="retry"`, "a read-only page offers actions")
		code, page = get(t, c, s.srv.URL+"/ui/rows/1")
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, page, "00000000  00 01 02", "binary payload as hex")
		require.Equal(t, http.StatusUnauthorized, post(t, c, s.srv.URL+"/ui/actions/retry", url.Values{"id": {"1"}}))
		require.Equal(t, http.StatusUnauthorized, post(t, c, s.srv.URL+"/ui/actions/purge", url.Values{"older_than": {"0s"}}, "Authorization", "Bearer "))
		require.Equal(t, outbox.StatusPermanentFailed, statusOf(t, s.store, id))
		code, _ = get(t, c, s.srv.URL+"/ui/rows?status=bogus")
		require.Equal(t, http.StatusBadRequest, code)
		code, _ = get(t, c, s.srv.URL+"/ui/rows/99")
		require.Equal(t, http.StatusNotFound, code)
	}
}

// Hostile input a tester tried: a banner text in a link, a lower-case
// bearer scheme, a raw ';' in a query (Go drops such pairs: the filter
// would be lost), a filter too long for LIKE, invalid UTF-8 in a row.
func TestHostileInput(t *testing.T) {
	s := newSetup(t, console.Config{Token: token, ReadOnlyWithoutToken: true})
	deadLetter(t, s.store, "a")
	c := noRedirect()
	code, page := get(t, c, s.srv.URL+"/ui/?done=Session+expired:+sign+in+at+https://evil.example/")
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, page, "evil.example", "an unsigned banner is shown")
	require.Equal(t, http.StatusSeeOther, post(t, noRedirect(), s.srv.URL+"/ui/actions/retry", url.Values{"id": {"1", "1", "1"}}, "Authorization", "bearer "+token))
	code, _ = get(t, c, s.srv.URL+"/ui/rows?subject=x.y';--")
	require.Equal(t, http.StatusBadRequest, code)
	code, _ = get(t, c, s.srv.URL+"/ui/rows?error="+strings.Repeat("%25", 5000))
	require.Equal(t, http.StatusBadRequest, code)

	_, err := s.store.Enqueue(context.Background(), outbox.Entry{IdempotencyKey: "bad", Subject: "events.bad", Payload: []byte("x"), Headers: []byte(`{"h":"` + strings.Repeat("v", 20000) + `"}`)})
	require.NoError(t, err)
	code, page = get(t, c, s.srv.URL+"/ui/rows/2")
	require.Equal(t, http.StatusOK, code)
	require.Less(t, len(page), 15000, "a row's page is bounded")
	require.Contains(t, page, "bytes in all")
}
