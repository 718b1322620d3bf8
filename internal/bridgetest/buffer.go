package bridgetest

import (
	"bytes"
	"encoding/json"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// SyncBuffer is a bytes.Buffer safe for one writer (a logger, a child's
// stderr) and readers at the same time.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Records decodes what was written so far as JSON log records, one per
// object (slog.NewJSONHandler's output).
func (b *SyncBuffer) Records(t testing.TB) []map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader([]byte(b.String())))
	var out []map[string]any
	for dec.More() {
		var r map[string]any
		require.NoError(t, dec.Decode(&r))
		out = append(out, r)
	}
	return out
}
