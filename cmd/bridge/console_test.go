package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outbox-bridge/bridge/internal/bridgetest"
)

// chromium is Debian's Chromium (apt-get install chromium), which .ci/run
// installs. Without it the browser test is skipped, and fails in CI.
func chromium(t *testing.T) string {
	t.Helper()
	path := cmpOr(os.Getenv("BRIDGE_TEST_CHROMIUM"), "/usr/bin/chromium")
	if _, err := exec.LookPath(path); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no Chromium at %s (CI=true): install Debian's chromium package or set BRIDGE_TEST_CHROMIUM", path)
		}
		t.Skipf("no Chromium at %s: apt-get install chromium, or set BRIDGE_TEST_CHROMIUM", path)
	}
	return path
}

// into runs a and keeps its value in dst, so that one chromedp.Do runs
// several steps and still reads their values.
func into[T any](dst *T, a chromedp.Action[T]) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		v, err := a(ctx, t)
		*dst = v
		return chromedp.Void{}, err
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// browser starts a headless Chromium with the flags this machine's closed
// network needs (no background requests, no QUIC) and a fresh profile.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	return ctx
}

// TestConsoleInABrowser drives the console in a real headless Chromium
// against the binary: two dead letters of two subjects (no stream took
// them, relay.max_attempts 1); the list shows both, a filter by subject
// one; after the missing stream is made, retrying that one from the page
// relays it (done, in the stream), the other stays a dead letter. Requests
// without the token read nothing and act on nothing.
func TestConsoleInABrowser(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	const token = "console-test-token-0123456789"
	n := bridgetest.StartNATS(t)
	dir := t.TempDir()
	dbURL := bridgetest.SQLiteURL(t)
	env := []string{"BRIDGE_DATABASE_URL=" + dbURL, "BRIDGE_NATS_URL=" + n.URL(),
		"BRIDGE_UI_ENABLED=true", "BRIDGE_UI_TOKEN=" + token, "BRIDGE_RELAY_MAX_ATTEMPTS=1"}
	r := runBridge(t, dir, env, "migrate")
	require.Equal(t, 0, r.code, "bridge migrate\n%s", r)
	run := start(t, dir, env, "run", "--ensure-stream", "EVENTS:events.>", "--http-listen", "127.0.0.1:0")
	base := "http://" + relayHTTPAddr(t, run)
	require.NotContains(t, run.stderr.String(), token, "the token is logged")

	for _, subject := range []string{"orders.created", "audit.logged"} {
		r := runBridge(t, dir, env, "enqueue", "--subject", subject, "--key", "k-"+subject, "--data", `{"hello":"`+subject+`"}`)
		require.Equal(t, 0, r.code, "bridge enqueue\n%s", r)
	}
	poll(t, 60*time.Second, func() bool { return status(t, dir, "--database-url", dbURL).Rows["permanent_failed"] == 2 },
		"the two rows never became dead letters")

	// Without the token: reading sends to the sign-in page, actions are refused.
	noRedirect := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Get(base + "/ui/rows")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.True(t, strings.HasPrefix(resp.Header.Get("Location"), "/ui/login"), "Location %q", resp.Header.Get("Location"))
	for _, auth := range []string{"", "Bearer wrong-token-wrong-token"} {
		req, _ := http.NewRequest(http.MethodPost, base+"/ui/actions/retry", strings.NewReader(url.Values{"id": {"1", "2"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := noRedirect.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "POST retry with %q", auth)
	}
	// A cookie without the form's CSRF token acts on nothing either.
	jar := &http.Cookie{Name: "bridge_console", Value: "not-the-session"}
	req, _ := http.NewRequest(http.MethodPost, base+"/ui/actions/retry", strings.NewReader("id=1"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(jar)
	resp, err = noRedirect.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Equal(t, int64(2), status(t, dir, "--database-url", dbURL).Rows["permanent_failed"], "a refused action changed rows")

	var rowsText, filtered, flash string
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/ui/rows?status=permanent_failed"),
		chromedp.WaitVisible(`#login`),
		chromedp.SendKeys(`input[name=token]`, token),
		chromedp.Click(`#signin`),
		chromedp.WaitVisible(`#rows`),
		into(&rowsText, chromedp.Text(`#rows`)),
	))
	require.Contains(t, rowsText, "orders.created")
	require.Contains(t, rowsText, "audit.logged")
	require.Contains(t, rowsText, "dead letter")

	_, js := n.JetStream(t)
	_, err = js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, Duplicates: 10 * time.Minute})
	require.NoError(t, err)

	require.NoError(t, chromedp.Do(ctx,
		chromedp.SetValue(`#filter input[name=subject]`, "orders.created"),
		chromedp.Click(`#apply`),
	))
	// Read the filtered page, not the one the click left: wait for its
	// address (reads during the navigation may fail; try again).
	poll(t, 30*time.Second, func() bool {
		var loc string
		return chromedp.Do(ctx, into(&loc, chromedp.Location())) == nil && strings.Contains(loc, "subject=orders.created")
	}, "the filter form never led to the filtered page")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.WaitVisible(`#rows`),
		into(&filtered, chromedp.Text(`#rows`)),
	))
	require.Contains(t, filtered, "orders.created")
	require.NotContains(t, filtered, "audit.logged", "the subject filter shows another subject")

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(`#rows input[type=checkbox]`),
		chromedp.Click(`#retry`),
		chromedp.WaitVisible(`#flash`),
		into(&flash, chromedp.Text(`#flash`)),
	))
	require.Contains(t, flash, "1 dead letter and 0 failed rows sent again")
	require.Contains(t, run.stderr.String(), `"msg":"console action"`, "no audit line for the action")

	orders, err := js.Stream(context.Background(), "ORDERS")
	require.NoError(t, err)
	poll(t, 60*time.Second, func() bool {
		info, err := orders.Info(context.Background())
		return err == nil && info.State.Msgs == 1
	}, "the retried dead letter never reached its stream")
	doc := status(t, dir, "--database-url", dbURL)
	poll(t, 30*time.Second, func() bool {
		doc = status(t, dir, "--database-url", dbURL)
		return doc.Rows["done"] == 1
	}, "the retried row is not done: %+v", doc.Rows)
	require.Equal(t, int64(1), doc.Rows["permanent_failed"], "the other dead letter should stay")

	// The overview, for docs/OPERATIONS.md (BRIDGE_UPDATE_SCREENSHOT=1 writes docs/console.png).
	var shot []byte
	var overview string
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/ui/"),
		chromedp.WaitVisible(`#counts`),
		into(&overview, chromedp.Text(`main`)),
		into(&shot, chromedp.FullScreenshot(100)),
	))
	require.Contains(t, overview, "Failed rows and dead letters by error")
	require.Contains(t, overview, "audit.logged")
	if os.Getenv("BRIDGE_UPDATE_SCREENSHOT") == "1" {
		require.NoError(t, os.WriteFile(filepath.Join("..", "..", "docs", "console.png"), shot, 0o644))
	}
	fmt.Fprintf(os.Stderr, "console screenshot: %d bytes\n", len(shot))
}
