package postgreswal

import (
	"cmp"
	"slices"
	"sort"

	"github.com/jackc/pglogrepl"
)

// idRuns are row ids kept as runs of consecutive ids, each with the commit
// LSN of its rows' transaction: the rows of one large insert take one run,
// not one entry each.
type idRuns []idRun

type idRun struct {
	first, last int64
	txLSN       pglogrepl.LSN
}

// add appends id, extending the last run when id follows it in the same
// transaction.
func (r *idRuns) add(id int64, txLSN pglogrepl.LSN) {
	if n := len(*r); n > 0 {
		last := &(*r)[n-1]
		if last.last+1 == id && last.txLSN == txLSN {
			last.last = id
			return
		}
	}
	*r = append(*r, idRun{first: id, last: id, txLSN: txLSN})
}

// keep drops the runs of transactions that commit before lsn.
func (r *idRuns) keep(lsn pglogrepl.LSN) {
	*r = slices.DeleteFunc(*r, func(run idRun) bool { return run.txLSN < lsn })
}

// normalize sorts the runs and merges those that overlap or touch, so
// that contains can search them.
func (r *idRuns) normalize() {
	runs := *r
	slices.SortFunc(runs, func(a, b idRun) int { return cmp.Compare(a.first, b.first) })
	out := runs[:0]
	for _, run := range runs {
		if n := len(out); n > 0 && run.first <= out[n-1].last+1 {
			out[n-1].last = max(out[n-1].last, run.last)
			out[n-1].txLSN = max(out[n-1].txLSN, run.txLSN)
			continue
		}
		out = append(out, run)
	}
	*r = out
}

// contains reports whether id is in a run; the runs must be normalized.
func (r idRuns) contains(id int64) bool {
	i := sort.Search(len(r), func(i int) bool { return r[i].last >= id })
	return i < len(r) && r[i].first <= id
}
