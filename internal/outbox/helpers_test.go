package outbox_test

import "testing"

// onEveryDatabase runs test against each database kind (kinds), each in
// a parallel subtest with its own table.
func onEveryDatabase(t *testing.T, test func(t *testing.T, kind string)) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			test(t, kind)
		})
	}
}
