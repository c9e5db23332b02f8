package bench

import (
	"time"

	"gorm.io/gorm"
)

// warmupShare: before each timed measurement the same case runs an
// eighth of its messages untimed, so that what ran before it (a case of
// another shape: other statements on the pool's connections, other stacks
// and heap in this process) does not count. Measured without it, the
// batched handler came out about 10% slower right after the deduplicator
// case than right after the same handler at another size
// (docs/benchmarks.md, "A warm-up before each measurement").
const warmupShare = 8

// warmedUp runs run with an eighth of n messages, then with n, each on
// empty tables, and returns the second run's time. timed is false for the
// warm-up: a run that meters its CPU meters the timed run alone.
func warmedUp(db *gorm.DB, n int64, run func(n int64, timed bool) (time.Duration, error)) (time.Duration, error) {
	var d time.Duration
	for i, m := range []int64{max(n/warmupShare, 1), n} {
		if err := db.Exec(truncateAll).Error; err != nil {
			return 0, err
		}
		var err error
		if d, err = run(m, i == 1); err != nil { // by position: with n = 1 both runs have one message
			return 0, err
		}
	}
	return d, nil
}
