package postgreswal

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestParseGUCDuration: time settings as SHOW prints them.
func TestParseGUCDuration(t *testing.T) {
	for text, want := range map[string]time.Duration{"60s": time.Minute, "3s": 3 * time.Second, "500ms": 500 * time.Millisecond,
		"1min": time.Minute, "2h": 2 * time.Hour, "1d": 24 * time.Hour, "0": 0, "250": 250 * time.Millisecond} {
		got, err := parseGUCDuration(text)
		require.NoError(t, err, text)
		require.Equal(t, want, got, text)
	}
	for _, bad := range []string{"", "s", "3 parsecs", "-1s"} {
		_, err := parseGUCDuration(bad)
		require.Error(t, err, bad)
	}
}
