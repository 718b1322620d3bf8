package sqlname_test

import (
	"os"
	"strings"
	"testing"
)

// The producer module checks table names with a copy of this package (it
// cannot import the relay's internal packages): the files stay the same
// (the test's import path aside), so that the producer accepts exactly the
// tables the relay accepts.
func TestProducerCopyIsIdentical(t *testing.T) {
	for _, file := range []string{"sqlname.go", "sqlname_test.go"} {
		original, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		copied, err := os.ReadFile("../../producer/internal/sqlname/" + file)
		if err != nil {
			t.Fatal(err)
		}
		got := strings.ReplaceAll(string(copied), "github.com/outbox-bridge/bridge/producer/internal/sqlname", "github.com/outbox-bridge/bridge/internal/sqlname")
		if got != string(original) {
			t.Errorf("producer/internal/sqlname/%s differs from internal/sqlname/%s: copy the change over", file, file)
		}
	}
}
