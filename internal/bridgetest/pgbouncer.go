package bridgetest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// PgBouncerBin is where Debian's package pgbouncer installs the pooler.
const PgBouncerBin = "/usr/sbin/pgbouncer"

// StartPgBouncer runs a real PgBouncer on a free loopback port in front of
// the PostgreSQL server of serverURL, pooling in mode ("session",
// "transaction" or "statement") with at most poolSize server sessions per
// database, and returns serverURL with its host and port replaced by the
// pooler's. It logs in to the server with serverURL's user and password,
// whatever user a client names (auth_type any). PgBouncer refuses to run as
// root, so a root test starts it as the user postgres. The pooler is
// stopped when the test ends.
//
// Without the binary the test is skipped, except under CI=true, where it
// fails: .ci/run installs the package.
func StartPgBouncer(t testing.TB, serverURL, mode string, poolSize int) string {
	t.Helper()
	if _, err := os.Stat(PgBouncerBin); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s: %v; .ci/run must install the Debian package pgbouncer", PgBouncerBin, err)
		}
		t.Skipf("%s: %v: PgBouncer tests need the Debian package pgbouncer", PgBouncerBin, err)
	}
	server, err := url.Parse(serverURL)
	require.NoError(t, err)
	password, _ := server.User.Password()
	port := serverPort(server)

	dir, err := os.MkdirTemp("", "pgbouncer-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	listen := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	login := "user=" + server.User.Username()
	if password != "" {
		login += " password=" + password
	}
	conf := fmt.Sprintf(`[databases]
* = host=%s port=%s %s pool_size=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = any
pool_mode = %s
max_client_conn = 500
ignore_startup_parameters = extra_float_digits
server_check_delay = 0
`, server.Hostname(), port, login, poolSize, listen, mode)
	path := filepath.Join(dir, "pgbouncer.ini")
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o644))

	cmd := exec.Command(PgBouncerBin, path)
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		require.NoError(t, err, "PgBouncer does not run as root; a root test runs it as postgres")
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	}
	var logs SyncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(t, cmd.Start(), "start %s", PgBouncerBin)
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("pgbouncer log:\n%s", logs.String())
		}
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(listen))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		select {
		case <-exited:
			t.Fatalf("pgbouncer exited at start:\n%s", logs.String())
		case <-ctx.Done():
			t.Fatalf("pgbouncer did not listen on %s within 20s:\n%s", addr, logs.String())
		case <-time.After(50 * time.Millisecond):
		}
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
	}
	pooled := *server
	pooled.Host = addr
	return pooled.String()
}

func serverPort(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	return "5432"
}
