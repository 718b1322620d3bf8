package console

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/outbox-bridge/bridge/internal/outbox"
)

// Defaults and bounds of the console.
const (
	// PageSizeDefault is how many rows a listing shows per page.
	PageSizeDefault = 50
	// PreviewBytesDefault is how much of a payload a row's page shows.
	PreviewBytesDefault = 4096
	// QueryTimeout bounds each page's statements.
	QueryTimeout = 5 * time.Second
	// sessionCookie carries a signed-in browser's session.
	sessionCookie = "bridge_console"
	// maxSelection is the most rows one action takes.
	maxSelection = outbox.ListRowsMax
	// SessionLifetime is how long a sign-in lasts.
	SessionLifetime = 12 * time.Hour
	// maxFilterBytes bounds a listing's subject and error filters.
	maxFilterBytes = 1024
	// maxFieldBytes bounds each text field a row's page shows (last_error,
	// headers, keys); the payload has PreviewBytesDefault.
	maxFieldBytes = 8192
)

// Config configures a Console.
type Config struct {
	// Token is the bearer token that allows actions (retry, requeue,
	// purge); a secret. Empty: no actions at all.
	Token string
	// ReadOnlyWithoutToken lets anyone who reaches the HTTP port read the
	// pages; else reading needs the token too.
	ReadOnlyWithoutToken bool
	// Table is the outbox table's name, for the pages' titles.
	Table string
	// InflightTimeout is relay.inflight_timeout: the requeue action moves
	// leases older than it, as the relay's in-flight recovery does.
	InflightTimeout time.Duration
}

// Opener opens the outbox table; the console calls it at its first request
// and again after a failure, so that it serves while the relay waits for
// its database. The func it returns closes what it opened.
type Opener func(ctx context.Context) (*outbox.Store, func(), error)

// Readiness is the relay's /readyz: each check's result by name, and
// whether it answers 200.
type Readiness func(ctx context.Context) (map[string]string, bool)

// Console is the web console at /ui/: the outbox at a glance, failed rows
// and dead letters grouped by error, a row whole, and the actions retry,
// requeue and purge. Pages are rendered on the server from embedded
// templates (no JavaScript is needed); each page runs a bounded number of
// bounded statements (a LIMIT, a payload preview), none of which locks a
// row.
//
// Who may do what: with Config.Token, a request that carries it (the
// header Authorization: Bearer <token>, or the session cookie set by the
// sign-in form) may read and act; a form post must also carry the
// session's CSRF token (an HMAC of the session by the token), and the
// cookie is SameSite=Strict and HttpOnly. Without it a request may read
// when ReadOnlyWithoutToken is set, and is sent to the sign-in page
// otherwise. Every action is logged at INFO with who (remote address) and
// what (ids, counts); the token is never logged.
type Console struct {
	cfg    Config
	open   Opener
	ready  Readiness
	logger *slog.Logger
	pages  *template.Template
	mux    *http.ServeMux

	mu     sync.Mutex
	store  *outbox.Store
	closer func()
}

//go:embed templates/*.html static/*.css
var assets embed.FS

// New returns the console; it opens nothing until its first request.
func New(cfg Config, open Opener, ready Readiness, logger *slog.Logger) (*Console, error) {
	pages, err := template.New("").Funcs(template.FuncMap{
		"ago":     ago,
		"when":    when,
		"classOf": classOf,
		"plural":  plural,
		"list":    statusOptions,
	}).ParseFS(assets, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("console templates: %w", err)
	}
	c := &Console{cfg: cfg, open: open, ready: ready, logger: logger, pages: pages, mux: http.NewServeMux()}
	c.mux.Handle("GET /ui/static/", http.StripPrefix("/ui/", http.FileServerFS(assets)))
	c.mux.HandleFunc("GET /ui/{$}", c.reader(c.overview))
	c.mux.HandleFunc("GET /ui/rows", c.reader(c.rows))
	c.mux.HandleFunc("GET /ui/rows/{id}", c.reader(c.row))
	c.mux.HandleFunc("GET /ui/login", c.loginForm)
	c.mux.HandleFunc("POST /ui/login", c.login)
	c.mux.HandleFunc("POST /ui/logout", c.logout)
	c.mux.HandleFunc("POST /ui/actions/{action}", c.act)
	return c, nil
}

// ServeHTTP serves the console's pages under /ui/.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; form-action 'self'; frame-ancestors 'none'")
	w.Header().Set("Referrer-Policy", "same-origin")
	w.Header().Set("Cache-Control", "no-store")
	c.mux.ServeHTTP(w, r)
}

// Close closes the table the console opened, if any.
func (c *Console) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closer != nil {
		c.closer()
		c.store, c.closer = nil, nil
	}
}

// table returns the open table, opening it when needed.
func (c *Console) table(ctx context.Context) (*outbox.Store, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.store != nil {
		return c.store, nil
	}
	store, closer, err := c.open(ctx)
	if err != nil {
		return nil, err
	}
	c.store, c.closer = store, closer
	return store, nil
}

// auth says what a request may do.
type auth struct {
	signedIn bool   // carries the token
	csrf     string // the session's CSRF token, when signed in by cookie
}

// session is the cookie value of a browser signed in at the Unix time
// issued: "<issued>.<HMAC by the token>", so that it reveals nothing of the
// token, ends SessionLifetime after it was issued, and ends for everyone
// when the token changes. Signing out removes the browser's cookie; a
// copied cookie stays valid until it expires or the token changes.
func (c *Console) session(issued int64) string {
	ts := strconv.FormatInt(issued, 10)
	return ts + "." + c.mac("session "+ts)
}

// validSession returns the issue time of a valid, unexpired session value.
func (c *Console) validSession(v string) (string, bool) {
	ts, _, ok := strings.Cut(v, ".")
	issued, err := strconv.ParseInt(ts, 10, 64)
	if !ok || err != nil || !equal(v, c.session(issued)) {
		return "", false
	}
	age := time.Since(time.Unix(issued, 0))
	return ts, age >= -time.Minute && age < SessionLifetime
}

// csrfToken is the CSRF token of the session issued at ts.
func (c *Console) csrfToken(ts string) string { return c.mac("csrf " + ts) }

// flashSig signs a message the console shows after an action, so that a
// link cannot make the console say something it did not.
func (c *Console) flashSig(msg string) string { return c.mac("flash " + msg) }

func (c *Console) mac(what string) string {
	m := hmac.New(sha256.New, []byte(c.cfg.Token))
	m.Write([]byte("outbox-bridge console " + what))
	return hex.EncodeToString(m.Sum(nil))
}

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

func (c *Console) authOf(r *http.Request) auth {
	if c.cfg.Token == "" {
		return auth{}
	}
	// The scheme is case-insensitive (RFC 9110, section 11.1).
	if scheme, h, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") && equal(strings.TrimSpace(h), c.cfg.Token) {
		return auth{signedIn: true}
	}
	if ck, err := r.Cookie(sessionCookie); err == nil {
		if ts, ok := c.validSession(ck.Value); ok {
			return auth{signedIn: true, csrf: c.csrfToken(ts)}
		}
	}
	return auth{}
}

// reader wraps a page handler: a request that may not read is sent to the
// sign-in page (or refused with 401 when it asked with a bearer token).
func (c *Console) reader(page func(http.ResponseWriter, *http.Request, auth)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		a := c.authOf(r)
		if !a.signedIn && !c.cfg.ReadOnlyWithoutToken {
			if r.Header.Get("Authorization") != "" {
				http.Error(w, "the console's token (ui.token) does not match", http.StatusUnauthorized)
				return
			}
			http.Redirect(w, r, "/ui/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		page(w, r, a)
	}
}

// view is what every page template gets.
type view struct {
	Table    string
	SignedIn bool
	CanAct   bool
	CSRF     string
	Flash    string
	Error    string
	Data     any
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, a auth, status int, name string, data any, pageErr error) {
	v := view{Table: c.cfg.Table, SignedIn: a.signedIn, CanAct: a.signedIn, CSRF: a.csrf, Data: data}
	if done := r.URL.Query().Get("done"); done != "" && c.cfg.Token != "" && equal(r.URL.Query().Get("sig"), c.flashSig(done)) {
		v.Flash = done
	}
	if pageErr != nil {
		v.Error = pageErr.Error()
		if status == http.StatusOK {
			status = http.StatusServiceUnavailable
		}
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := c.pages.ExecuteTemplate(w, name, v); err != nil {
		c.logger.Warn("console page", slog.String("page", name), slog.Any("error", err))
	}
}

// overviewData is the outbox at a glance.
type overviewData struct {
	Counts []statusCount
	Stats  outbox.Stats
	Ready  []check
	IsOK   bool
	Groups []outbox.ErrorGroup
}

type statusCount struct {
	Status outbox.Status
	Rows   int64
}

type check struct{ Name, Result string }

func (c *Console) overview(w http.ResponseWriter, r *http.Request, a auth) {
	ctx, cancel := context.WithTimeout(r.Context(), QueryTimeout)
	defer cancel()
	var d overviewData
	if c.ready != nil {
		result, ok := c.ready(ctx)
		d.IsOK = ok
		for name, res := range result {
			d.Ready = append(d.Ready, check{name, res})
		}
		sort.Slice(d.Ready, func(i, j int) bool { return d.Ready[i].Name < d.Ready[j].Name })
	}
	store, err := c.table(ctx)
	if err == nil {
		d.Stats, err = store.Stats(ctx, 0)
	}
	if err == nil {
		for _, st := range outbox.Statuses {
			d.Counts = append(d.Counts, statusCount{st, d.Stats.Rows[st]})
		}
		d.Groups, err = store.ErrorGroups(ctx, 0)
		for i := range d.Groups {
			d.Groups[i].Subject, d.Groups[i].ErrorPrefix = clean(d.Groups[i].Subject), clean(d.Groups[i].ErrorPrefix)
		}
	}
	c.render(w, r, a, http.StatusOK, "overview.html", d, err)
}

// rowsData is one page of a listing.
type rowsData struct {
	Filter filter
	// Back is this page, where an action returns.
	Back     string
	Rows     []outbox.RowSummary
	NextPage string
}

// filter is a listing's query: which rows, which page.
type filter struct {
	Status  string // "errors" (failed and dead letters), or one status
	Subject string
	Error   string
	Before  int64
}

func parseFilter(rawQuery string) (filter, []outbox.Status, error) {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return filter{Status: "errors"}, nil, fmt.Errorf("query %q: %v (a ';' must be written %%3B)", rawQuery, err)
	}
	f := filter{Status: q.Get("status"), Subject: q.Get("subject"), Error: q.Get("error")}
	if len(f.Subject) > maxFilterBytes || len(f.Error) > maxFilterBytes {
		return f, nil, fmt.Errorf("subject and error filters: at most %d bytes each", maxFilterBytes)
	}
	if f.Status == "" {
		f.Status = "errors"
	}
	var statuses []outbox.Status
	switch f.Status {
	case "errors":
		statuses = []outbox.Status{outbox.StatusPermanentFailed, outbox.StatusFailed}
	default:
		statuses = []outbox.Status{outbox.Status(f.Status)}
		known := false
		for _, s := range outbox.Statuses {
			known = known || s == statuses[0]
		}
		if !known {
			return f, nil, fmt.Errorf("status %q: must be errors or one of %v", f.Status, outbox.Statuses)
		}
	}
	if b := q.Get("before"); b != "" {
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n < 0 {
			return f, nil, fmt.Errorf("before %q: must be a row id", b)
		}
		f.Before = n
	}
	return f, statuses, nil
}

func (f filter) query(before int64) string {
	q := url.Values{"status": {f.Status}}
	if f.Subject != "" {
		q.Set("subject", f.Subject)
	}
	if f.Error != "" {
		q.Set("error", f.Error)
	}
	if before > 0 {
		q.Set("before", strconv.FormatInt(before, 10))
	}
	return "/ui/rows?" + q.Encode()
}

func (c *Console) rows(w http.ResponseWriter, r *http.Request, a auth) {
	f, statuses, err := parseFilter(r.URL.RawQuery)
	if err != nil {
		c.render(w, r, a, http.StatusBadRequest, "rows.html", rowsData{Filter: f}, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), QueryTimeout)
	defer cancel()
	d := rowsData{Filter: f, Back: f.query(f.Before)}
	store, err := c.table(ctx)
	if err == nil {
		d.Rows, err = store.ListRows(ctx, outbox.RowFilter{Statuses: statuses, Subject: f.Subject, ErrorContains: f.Error,
			Before: f.Before, Limit: PageSizeDefault})
	}
	for i := range d.Rows {
		cleanSummary(&d.Rows[i])
	}
	if len(d.Rows) == PageSizeDefault {
		d.NextPage = f.query(d.Rows[len(d.Rows)-1].ID)
	}
	c.render(w, r, a, http.StatusOK, "rows.html", d, err)
}

// rowData is one row whole.
type rowData struct {
	Row outbox.RowDetail
	// Text is the payload preview when it is printable UTF-8; Hex else.
	Text, Hex string
	Cut       bool // the preview is shorter than the payload
}

func (c *Console) row(w http.ResponseWriter, r *http.Request, a auth) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		c.render(w, r, a, http.StatusBadRequest, "row.html", rowData{}, fmt.Errorf("row id %q: must be a number", r.PathValue("id")))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), QueryTimeout)
	defer cancel()
	store, err := c.table(ctx)
	var d rowData
	found := false
	if err == nil {
		d.Row, found, err = store.Row(ctx, id, PreviewBytesDefault)
	}
	if err == nil && !found {
		c.render(w, r, a, http.StatusNotFound, "row.html", d, fmt.Errorf("no row %d in %s", id, c.cfg.Table))
		return
	}
	cleanSummary(&d.Row.RowSummary)
	d.Row.IdempotencyKey, d.Row.OrderingKey = clean(d.Row.IdempotencyKey), clean(d.Row.OrderingKey)
	d.Row.Headers, d.Row.Owner, d.Row.Stream = clean(d.Row.Headers), clean(d.Row.Owner), clean(d.Row.Stream)
	d.Text, d.Hex = preview(d.Row.Payload)
	d.Cut = int64(len(d.Row.Payload)) < d.Row.PayloadBytes
	c.render(w, r, a, http.StatusOK, "row.html", d, err)
}

// clean makes a column's text fit a page: invalid UTF-8 as U+FFFD, and at
// most maxFieldBytes bytes, the cut said.
func clean(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > maxFieldBytes {
		cut := maxFieldBytes
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = fmt.Sprintf("%s… (%d bytes in all)", s[:cut], len(s))
	}
	return s
}

func cleanSummary(s *outbox.RowSummary) {
	s.Subject, s.LastError = clean(s.Subject), clean(s.LastError)
}

// preview is p as text when it is valid UTF-8 without control characters
// but tab and newlines, and as hex otherwise.
func preview(p []byte) (text, hexed string) {
	if utf8.Valid(p) && !strings.ContainsFunc(string(p), func(r rune) bool {
		return r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == 0x7f
	}) {
		return string(p), ""
	}
	return "", hex.Dump(p)
}

func (c *Console) loginForm(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, c.authOf(r), http.StatusOK, "login.html", safeNext(r.URL.Query().Get("next")), nil)
}

// safeNext is where to go after signing in: a path of the console only.
func safeNext(next string) string {
	if strings.HasPrefix(next, "/ui/") && !strings.HasPrefix(next, "//") && !strings.Contains(next, "\\") {
		return next
	}
	return "/ui/"
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.PostFormValue("next"))
	if c.cfg.Token == "" || !equal(r.PostFormValue("token"), c.cfg.Token) {
		c.logger.Warn("console sign-in refused", slog.String("remote", r.RemoteAddr))
		c.render(w, r, auth{}, http.StatusUnauthorized, "login.html", next, errors.New("that is not the console's token (ui.token)"))
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: c.session(time.Now().Unix()), Path: "/ui/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: int(SessionLifetime / time.Second)})
	c.logger.Info("console sign-in", slog.String("remote", r.RemoteAddr))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/ui/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

// act runs an action: retry (the selected failed rows and dead letters),
// requeue (leases older than relay.inflight_timeout) or purge (done rows
// relayed more than the given age ago).
func (c *Console) act(w http.ResponseWriter, r *http.Request) {
	a := c.authOf(r)
	if !a.signedIn {
		http.Error(w, "actions need the console's token (ui.token): sign in at /ui/login or send Authorization: Bearer", http.StatusUnauthorized)
		return
	}
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form: "+err.Error(), http.StatusBadRequest)
		return
	}
	if a.csrf != "" && !equal(r.PostFormValue("csrf"), a.csrf) {
		http.Error(w, "the form's CSRF token does not match this session: reload the page", http.StatusForbidden)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), QueryTimeout)
	defer cancel()
	store, err := c.table(ctx)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	action := r.PathValue("action")
	var done string
	switch action {
	case "retry":
		ids, perr := selection(r.PostForm["id"])
		if perr != nil {
			http.Error(w, perr.Error(), http.StatusBadRequest)
			return
		}
		dead, derr := store.RetryDead(ctx, ids)
		failed, ferr := store.RetryFailed(ctx, ids)
		if err = errors.Join(derr, ferr); err == nil {
			done = fmt.Sprintf("retry: %s and %s sent again", plural(dead, "dead letter"), plural(failed, "failed row"))
			c.logger.Info("console action", slog.String("action", action), slog.String("remote", r.RemoteAddr),
				slog.Any("ids", ids), slog.Int("dead_letters", dead), slog.Int("failed", failed))
		}
	case "requeue":
		var n int
		n, err = store.RequeueInflightOlderThan(ctx, c.cfg.InflightTimeout)
		if err == nil {
			done = fmt.Sprintf("requeue: %s in flight longer than %s requeued", plural(n, "row"), c.cfg.InflightTimeout)
			c.logger.Info("console action", slog.String("action", action), slog.String("remote", r.RemoteAddr), slog.Int("rows", n))
		}
	case "purge":
		age, perr := time.ParseDuration(r.PostFormValue("older_than"))
		if perr != nil || age < 0 {
			http.Error(w, fmt.Sprintf("older_than %q: must be a duration such as 24h, not negative", r.PostFormValue("older_than")), http.StatusBadRequest)
			return
		}
		var n int
		n, err = store.PurgeDoneOlderThan(ctx, age, outbox.PurgeBatchDefault)
		if err == nil {
			done = fmt.Sprintf("purge: %s relayed more than %s ago deleted", plural(n, "done row"), age)
			c.logger.Info("console action", slog.String("action", action), slog.String("remote", r.RemoteAddr),
				slog.Duration("older_than", age), slog.Int("rows", n))
		}
	default:
		http.Error(w, fmt.Sprintf("action %q: must be retry, requeue or purge", action), http.StatusNotFound)
		return
	}
	if err != nil {
		c.logger.Warn("console action failed", slog.String("action", action), slog.String("remote", r.RemoteAddr), slog.Any("error", err))
		http.Error(w, action+": "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	back := safeNext(r.PostFormValue("back"))
	sep := "?"
	if strings.Contains(back, "?") {
		sep = "&"
	}
	http.Redirect(w, r, back+sep+"done="+url.QueryEscape(done)+"&sig="+c.flashSig(done), http.StatusSeeOther)
}

// selection parses the selected row ids: 1 to maxSelection of them.
func selection(values []string) ([]int64, error) {
	if len(values) == 0 {
		return nil, errors.New("select at least one row")
	}
	if len(values) > maxSelection {
		return nil, fmt.Errorf("%d rows selected: at most %d at once", len(values), maxSelection)
	}
	ids := make([]int64, 0, len(values))
	for _, v := range values {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil || id <= 0 {
			return nil, fmt.Errorf("id %q: must be a row id", v)
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// statusOptions are the listing's status choices.
func statusOptions() []string {
	out := []string{"errors"}
	for _, s := range outbox.Statuses {
		out = append(out, string(s))
	}
	return out
}

// classOf names what a row's status means to an operator.
func classOf(s outbox.Status) string {
	switch s {
	case outbox.StatusPermanentFailed:
		return "dead letter"
	case outbox.StatusFailed:
		return "retrying"
	}
	return string(s)
}

// plural is "1 row", "2 rows".
func plural(n int, noun string) string { return outbox.Count(n, noun) }

func ago(d time.Duration) string {
	if d <= 0 {
		return "—"
	}
	return d.Round(time.Second).String()
}

func when(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}
