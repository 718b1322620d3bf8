package producer_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// database/sql keeps a connection opener per pool until Close.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
	)
}
