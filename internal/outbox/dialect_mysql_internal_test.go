package outbox

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMySQLURLBecomesDriverConfig(t *testing.T) {
	t.Parallel()
	cfg, err := mysqlConfig("mysql://app:p%40ss%3Aw%2Frd@db.example:3307/shop?tls=skip-verify&timeout=5s&wait_timeout=600")
	require.NoError(t, err)
	require.Equal(t, "app", cfg.User)
	require.Equal(t, "p@ss:w/rd", cfg.Passwd)
	require.Equal(t, "tcp", cfg.Net)
	require.Equal(t, "db.example:3307", cfg.Addr)
	require.Equal(t, "shop", cfg.DBName)
	require.Equal(t, "skip-verify", cfg.TLSConfig)
	require.NotNil(t, cfg.TLS)
	require.Equal(t, "5s", cfg.Timeout.String())
	require.Equal(t, "600", cfg.Params["wait_timeout"], "unknown parameters are session variables")
	require.Equal(t, "'+00:00'", cfg.Params["time_zone"])
	require.Contains(t, cfg.Params["sql_mode"], "STRICT_ALL_TABLES")
	require.False(t, cfg.ParseTime)
	require.False(t, cfg.MultiStatements)
	require.True(t, cfg.InterpolateParams, "arguments are written into the statement, not prepared")
	// The DSN the driver would be given, password and all.
	require.Contains(t, cfg.FormatDSN(), "app:p@ss:w/rd@tcp(db.example:3307)/shop?")

	cfg, err = mysqlConfig("mysql://root@127.0.0.1/test?tls=true&time_zone=%27%2B02%3A00%27&clientFoundRows=true&multiStatements=true")
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:3306", cfg.Addr, "default port")
	require.Equal(t, "127.0.0.1", cfg.TLS.ServerName, "tls=true verifies the URL's host")
	require.Equal(t, "'+02:00'", cfg.Params["time_zone"], "the URL's time_zone wins")
	require.False(t, cfg.ClientFoundRows, "affected rows must be changed rows")
	require.False(t, cfg.MultiStatements)

	// A URL that chooses the driver's interpolation, charset or collation
	// keeps the driver's default: off (unsafe under gbk, big5, sjis…).
	for rawURL, want := range map[string]bool{
		"mysql://root@h/db?interpolateParams=false":                     false,
		"mysql://root@h/db?charset=gbk":                                 false,
		"mysql://root@h/db?collation=utf8mb4_unicode_ci":                false,
		"mysql://root@h/db?character_set_client=gbk":                    false,
		"mysql://root@h/db?CHARACTER_SET_CONNECTION=big5":               false,
		"mysql://root@h/db?InterpolateParams=false":                     false,
		"mysql://root@tcp(h:3306)/db?charset=sjis":                      false,
		"mysql://root@tcp(h:3306)/db?loc=UTC":                           true,
		"mysql://root:a%3Fcharset=x@tcp(h:3306)/db":                     true,
		"mysql://root@h/db?wait_timeout=600&time_zone=%27%2B02%3A00%27": true,
	} {
		cfg, err := mysqlConfig(rawURL)
		require.NoError(t, err, rawURL)
		require.Equal(t, want, cfg.InterpolateParams, rawURL)
	}
	// With interpolation the driver asks the server for its packet limit, so
	// that a statement too long once escaped is prepared instead.
	cfg, err = mysqlConfig("mysql://root@h/db")
	require.NoError(t, err)
	require.Zero(t, cfg.MaxAllowedPacket, "read from the server")
	cfg, err = mysqlConfig("mysql://root@h/db?maxAllowedPacket=1000000")
	require.NoError(t, err)
	require.Equal(t, 1000000, cfg.MaxAllowedPacket, "the URL's")
	require.True(t, mysqlParamSet(map[string]string{"TX_ISOLATION": "'REPEATABLE-READ'"}, "transaction_isolation", "tx_isolation"),
		"the server reads variable names in any case")

	for _, bad := range []string{"mysql:///db", "mysql://h/db?tls=maybe", "mysql://u:se/cret@h/db"} {
		_, err := mysqlConfig(bad)
		require.Error(t, err, bad)
		require.NotContains(t, err.Error(), "cret", "no password in errors")
	}
}

// The URL's parameters reach the driver whatever the password holds: a
// percent-encoded ? / & = # in it once made the parameters part of the
// database name ("test&tls=true"), TLS and timeouts silently dropped.
func TestMySQLURLParametersSurviveEveryPasswordCharacter(t *testing.T) {
	t.Parallel()
	for c := byte(0x21); c < 0x7f; c++ {
		if ('0' <= c && c <= '9') || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') {
			continue
		}
		password := "S3cr" + string(c) + "t" + string(c) + "99"
		raw := "mysql://app:" + url.QueryEscape(password) + "@db.example:3307/shop?tls=skip-verify&timeout=5s&wait_timeout=600"
		cfg, err := mysqlConfig(raw)
		require.NoError(t, err, "password character %q", c)
		require.Equal(t, password, cfg.Passwd, "password character %q", c)
		require.Equal(t, "shop", cfg.DBName, "password character %q", c)
		require.Equal(t, "skip-verify", cfg.TLSConfig, "password character %q", c)
		require.Equal(t, "5s", cfg.Timeout.String(), "password character %q", c)
		require.Equal(t, "600", cfg.Params["wait_timeout"], "password character %q", c)
	}
}

func TestMySQLExpand(t *testing.T) {
	t.Parallel()
	require.Equal(t, "a IN (?, ?, ?) AND CASE id WHEN ? THEN ? WHEN ? THEN ? WHEN ? THEN ? END",
		mysqlExpand("a IN ("+mysqlIDs+") AND CASE id "+mysqlArms+" END", 3))
}
