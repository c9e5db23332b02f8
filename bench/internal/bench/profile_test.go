package bench

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"gorm.io/gorm"

	"github.com/postroom/postroom/store"
	"github.com/postroom/postroom/transport/amqp"
	"github.com/postroom/postroom/transport/gochannel"
)

// The benchmarks below run one case of the bench each, so that a CPU
// profile shows that case alone (postroom-bench -cpuprofile profiles a
// whole run). From bench/, for example:
//
//	go test -run '^$' -bench 'Batch/inbox.batch/size=100$' -benchtime 8000x -count 3 -cpuprofile batch.prof ./internal/bench/
//	go test -run '^$' -bench 'RabbitMQ/bus$' -benchtime 8000x -count 3 -cpuprofile amqp.prof ./internal/bench/
//	go test -run '^$' -bench 'InMemory/(ceiling|bus)$' -benchtime 8000x -count 3 ./internal/bench/
//
// They need PostgreSQL (POSTROOM_POSTGRES_DSN) and, for RabbitMQ,
// POSTROOM_AMQP_URL, with the defaults of a local machine; a missing
// server fails them (scripts/services.sh starts both).

// BenchmarkBatch is the batched inbox handler (WithBatch) and the batch
// handler (HandleBatch) per batch size, in-memory transport and PostgreSQL
// at concurrency 8 (the batch: line).
func BenchmarkBatch(b *testing.B) {
	db, _ := benchDB(b)
	for _, kind := range []Kind{InboxBatch, BatchHandler} {
		for _, size := range batchSizes {
			b.Run(fmt.Sprintf("%s/size=%d", kind, size), func(b *testing.B) {
				if err := db.Exec(truncateAll).Error; err != nil {
					b.Fatal(err)
				}
				d, err := runE2EWith(context.Background(), gochannel.New(gochannel.Config{}), db, kind, 8, int64(b.N),
					e2eOptions{batch: batchSpec{size: size, maxWait: batchDefault.maxWait}})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(b.N)/d.Seconds(), "msg/s")
			})
		}
	}
}

// BenchmarkRabbitMQ is the RabbitMQ + PostgreSQL inbox at concurrency 8:
// the hand-rolled consumer, the bus, the bus batched (the rabbitmq lines).
func BenchmarkRabbitMQ(b *testing.B) {
	db, pool := benchDB(b)
	url := cmp.Or(os.Getenv("POSTROOM_AMQP_URL"), "amqp://guest:guest@127.0.0.1:5672/")
	for _, c := range []struct {
		name string
		kind Kind
	}{{"raw", ""}, {"bus", Inbox}, {"batch", InboxBatch}} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			if err := db.Exec(truncateAll).Error; err != nil {
				b.Fatal(err)
			}
			var d time.Duration
			var err error
			if c.kind == "" {
				d, err = runRawAMQP(ctx, pool, url, 8, rawAMQPPrefetch, int64(b.N), nil)
			} else {
				var tr *amqp.Transport
				if tr, err = amqp.New(amqp.Config{URL: url}); err != nil {
					b.Fatal(err)
				}
				d, err = runE2EOn(ctx, tr, db, c.kind, 8, int64(b.N))
			}
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/d.Seconds(), "msg/s")
		})
	}
}

// benchDB is a schema of its own with the bench's tables, as Run makes
// it, dropped when b ends.
func benchDB(b *testing.B) (*gorm.DB, *pgxpool.Pool) {
	b.Helper()
	ctx := context.Background()
	base := cmp.Or(os.Getenv("POSTROOM_POSTGRES_DSN"), "postgres://postgres@127.0.0.1:5432/postroom_test?sslmode=disable")
	admin, err := store.Open(base)
	if err != nil {
		b.Fatalf("%v (scripts/services.sh starts PostgreSQL)", err)
	}
	b.Cleanup(func() { store.Close(admin) })
	schema := fmt.Sprintf("bench_%d", time.Now().UnixNano())
	if err := admin.Exec("CREATE SCHEMA " + schema).Error; err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { admin.Exec("DROP SCHEMA " + schema + " CASCADE") })
	dsn, err := withSearchPath(base, schema)
	if err != nil {
		b.Fatal(err)
	}
	db, err := store.Open(dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close(db) })
	if sqlDB, err := db.DB(); err == nil {
		sqlDB.SetMaxOpenConns(16)
		sqlDB.SetMaxIdleConns(16)
	}
	if _, err := store.Migrate(ctx, db, store.Tables{}); err != nil {
		b.Fatal(err)
	}
	for _, stmt := range []string{createBusiness, createProcessed} {
		if err := db.Exec(stmt).Error; err != nil {
			b.Fatal(err)
		}
	}
	pool, err := pgxpool.New(ctx, dsn+"&pool_max_conns=16")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return db, pool
}

// BenchmarkInMemory is the inbox at concurrency 8 on PostgreSQL: raw pgx
// (the ceiling) and the bus on the in-memory transport (framework/ceiling).
func BenchmarkInMemory(b *testing.B) {
	db, pool := benchDB(b)
	b.Run("ceiling", func(b *testing.B) {
		if err := db.Exec(truncateAll).Error; err != nil {
			b.Fatal(err)
		}
		d, err := runRaw(context.Background(), pool, rawOps[Inbox], 8, int64(b.N))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(b.N)/d.Seconds(), "msg/s")
	})
	b.Run("bus", func(b *testing.B) {
		if err := db.Exec(truncateAll).Error; err != nil {
			b.Fatal(err)
		}
		d, err := runE2EOn(context.Background(), gochannel.New(gochannel.Config{}), db, Inbox, 8, int64(b.N))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(b.N)/d.Seconds(), "msg/s")
	})
}
