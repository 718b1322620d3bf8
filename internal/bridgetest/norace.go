//go:build !race

package bridgetest

// Race reports whether the tests run with the race detector (see race.go).
const Race = false
