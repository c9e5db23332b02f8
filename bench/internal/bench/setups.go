package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"gorm.io/gorm"

	"github.com/postroom/postroom/store"
	"github.com/postroom/postroom/transport/amqp"
)

// busKinds are the end-to-end variants.
var busKinds = []Kind{Plain, Inbox, InboxStale, Naive, Deduplicator}

// RabbitResult is the RabbitMQ + PostgreSQL measurement at concurrency 8.
type RabbitResult struct {
	// Bus is the bus's rate per kind.
	Bus map[Kind]float64
	// Raw is the hand-rolled amqp091 + pgx consumer's rate (runRawAMQP).
	Raw float64
	// CPU is the CPU per message of each inbox case, over every round.
	CPU map[Kind]cpuPerMessage
}

// cpuPerMessage is the CPU time one message cost, by process.
type cpuPerMessage struct{ Bench, Postgres, Broker time.Duration }

func (c cpuPerMessage) String() string {
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	return fmt.Sprintf("%.0f + %.0f + %.0f = %.0f µs", us(c.Bench), us(c.Postgres), us(c.Broker), us(c.Bench+c.Postgres+c.Broker))
}

// runRabbitMQ measures the hand-rolled consumer and the bus's kinds (and
// InboxBatch and BatchHandler) end to end on RabbitMQ at concurrency
// 8, with the transport's defaults (classic queues, amqp.PrefetchDefault),
// in interleaved rounds: the median counts. The CPU of the inbox cases is
// metered by meter's copies (the bench process, its PostgreSQL backends,
// RabbitMQ) for the backends of meter.app, asked through meter.admin.
func runRabbitMQ(ctx context.Context, db *gorm.DB, pool *pgxpool.Pool, meter cpuMeter, url string, kinds []Kind, n int64, rounds int, out io.Writer) (RabbitResult, error) {
	const rawCase Kind = "raw_amqp"
	cases := append([]Kind{rawCase}, kinds...)
	cases = append(cases, InboxBatch, BatchHandler)
	times := map[Kind][]time.Duration{}
	meters := map[Kind]*cpuMeter{}
	for _, kind := range []Kind{rawCase, Inbox, InboxBatch, BatchHandler} {
		meters[kind] = &cpuMeter{admin: meter.admin, app: meter.app, broker: true}
	}
	for range max(rounds, 1) {
		for _, kind := range cases {
			d, err := warmedUp(db, n, func(n int64, timed bool) (time.Duration, error) {
				var meter *cpuMeter
				if timed {
					meter = meters[kind]
				}
				if kind == rawCase {
					return runRawAMQP(ctx, pool, url, 8, rawAMQPPrefetch, n, meter)
				}
				tr, err := amqp.New(amqp.Config{URL: url})
				if err != nil {
					return 0, err
				}
				return runE2EWith(ctx, tr, db, kind, 8, n, e2eOptions{meter: meter})
			})
			if err != nil {
				return RabbitResult{}, fmt.Errorf("rabbitmq %s: %w", kind, err)
			}
			times[kind] = append(times[kind], d)
		}
	}
	r := RabbitResult{Bus: map[Kind]float64{}, CPU: map[Kind]cpuPerMessage{}}
	for kind, m := range meters {
		per := func(ds []time.Duration) time.Duration {
			var sum time.Duration
			for _, d := range ds {
				sum += d
			}
			return sum / time.Duration(int64(len(ds))*n)
		}
		r.CPU[kind] = cpuPerMessage{Bench: per(m.Proc), Postgres: per(m.Postgres), Broker: per(m.Broker)}
	}
	for _, kind := range cases {
		ds := times[kind]
		slices.Sort(ds)
		rate := float64(n) / ds[len(ds)/2].Seconds()
		if kind == rawCase {
			r.Raw = rate
		} else {
			r.Bus[kind] = rate
		}
	}
	printRates(out, "rabbitmq + postgres", r.Bus)
	fmt.Fprintf(out, "rabbitmq + postgres at concurrency 8, prefetch %d: hand-rolled amqp091 + pgx inbox consumer %.0f msg/s; postroom inbox %.0f msg/s (%.2f of it)",
		rawAMQPPrefetch, r.Raw, r.Bus[Inbox], r.Bus[Inbox]/r.Raw)
	fmt.Fprintf(out, "; postroom inbox batched (size %d, max wait %s) %.0f msg/s; batch handler %.0f msg/s\n", batchDefault.size, batchDefault.maxWait, r.Bus[InboxBatch], r.Bus[BatchHandler])
	fmt.Fprintf(out, "rabbitmq + postgres CPU per message (this process + its PostgreSQL backends + RabbitMQ's beam.smp): hand-rolled %s; postroom inbox %s; postroom inbox batched %s; batch handler %s\n",
		r.CPU[rawCase], r.CPU[Inbox], r.CPU[InboxBatch], r.CPU[BatchHandler])
	return r, nil
}

func printRates(out io.Writer, where string, rate map[Kind]float64) {
	fmt.Fprintf(out, "%s at concurrency 8:", where)
	for _, kind := range busKinds {
		if v, ok := rate[kind]; ok {
			fmt.Fprintf(out, " %s %.0f", kind, v)
		}
	}
	fmt.Fprint(out, " msg/s")
	if _, ok := rate[Plain]; ok {
		fmt.Fprintf(out, " (inbox/plain %.2f)", rate[Inbox]/rate[Plain])
	}
	fmt.Fprintln(out)
}

// runSQLite measures every variant end to end on the embedded default (a
// SQLite file, in-memory transport) at concurrency 8.
func runSQLite(ctx context.Context, n int64, out io.Writer) (map[Kind]float64, error) {
	dir, err := os.MkdirTemp("", "postroom-bench")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	db, err := store.Open(filepath.Join(dir, "bench.db"))
	if err != nil {
		return nil, err
	}
	defer store.Close(db)
	if _, err := store.Migrate(ctx, db, store.Tables{}); err != nil {
		return nil, err
	}
	if err := db.Exec("CREATE TABLE business (id INTEGER PRIMARY KEY, message_id TEXT NOT NULL, amount INTEGER NOT NULL)").Error; err != nil {
		return nil, err
	}
	if err := db.Exec(createProcessed).Error; err != nil {
		return nil, err
	}
	rate := map[Kind]float64{}
	for _, kind := range busKinds {
		for _, table := range []string{"business", "processed", "postroom_inbox", "postroom_stale_watermarks"} {
			if err := db.Exec("DELETE FROM " + table).Error; err != nil {
				return nil, err
			}
		}
		d, err := runE2E(ctx, db, kind, 8, n)
		if err != nil {
			return nil, fmt.Errorf("sqlite %s: %w", kind, err)
		}
		rate[kind] = float64(n) / d.Seconds()
	}
	printRates(out, "sqlite (embedded default)", rate)
	return rate, nil
}
