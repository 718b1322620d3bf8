//go:build race

package bridgetest

// Race reports whether the tests run with the race detector, under which
// SQLite (modernc.org/sqlite, C translated to Go) runs about 30 times
// slower: tests that push many rows through SQLite push fewer then.
const Race = true
