package bench

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"gorm.io/gorm"

	"github.com/postroom/postroom/outbox"
	"github.com/postroom/postroom/store"
	"github.com/postroom/postroom/transport/amqp"
)

// BenchmarkMariaDBRelays is the outbox relay on MariaDB to RabbitMQ, one
// relay against three competing ones, while eight writers commit b.N
// messages, one per transaction (handlers sending one event each). It
// reports the rate from the first write until the backlog is empty, and
// the backlog left when the writes ended (docs/benchmarks.md):
//
//	go test -run '^$' -bench MariaDBRelays -benchtime 4000x ./internal/bench/
func BenchmarkMariaDBRelays(b *testing.B) {
	base := cmp.Or(os.Getenv("POSTROOM_MYSQL_DSN"), "mysql://root@tcp(127.0.0.1:3306)/")
	root, err := store.Open(base)
	if err != nil {
		b.Fatalf("%v (scripts/services.sh starts MariaDB)", err)
	}
	b.Cleanup(func() { store.Close(root) })
	amqpURL := cmp.Or(os.Getenv("POSTROOM_AMQP_URL"), "amqp://guest:guest@127.0.0.1:5672/")
	for _, relays := range []int{1, 3} {
		b.Run(fmt.Sprintf("relays=%d", relays), func(b *testing.B) {
			name := fmt.Sprintf("bench_relays_%d", time.Now().UnixNano())
			if err := root.Exec("CREATE DATABASE " + name).Error; err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { root.Exec("DROP DATABASE " + name) })
			db, err := store.Open("mysql://root@tcp(127.0.0.1:3306)/" + name)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { store.Close(db) })
			if _, err := store.Migrate(context.Background(), db, store.Tables{}); err != nil {
				b.Fatal(err)
			}
			tr, err := amqp.New(amqp.Config{URL: amqpURL})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = tr.Close() })
			topic := "bench-relays-" + name
			writer, err := outbox.New(outbox.Config{DB: db, Destination: tr.Publisher()})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, relays)
			for range relays {
				o, err := outbox.New(outbox.Config{DB: db, Destination: tr.Publisher(), PollInterval: 10 * time.Millisecond})
				if err != nil {
					b.Fatal(err)
				}
				go func() { done <- o.Run(ctx) }()
				b.Cleanup(func() { _ = o.Close() })
			}
			b.Cleanup(func() {
				cancel()
				for range relays {
					<-done
				}
			})
			const writers = 8
			start := time.Now()
			wrote := make(chan error, writers)
			for w := range writers {
				go func() {
					for i := w; i < b.N; i += writers {
						if err := db.Transaction(func(tx *gorm.DB) error {
							return writer.Publish(ctx, tx, topic, message.NewMessage(fmt.Sprintf("m-%d", i), []byte("{}")))
						}); err != nil {
							wrote <- err
							return
						}
					}
					wrote <- nil
				}()
			}
			for range writers {
				if err := <-wrote; err != nil {
					b.Fatal(err)
				}
			}
			left, err := writer.Backlog(ctx)
			if err != nil {
				b.Fatal(err)
			}
			for backlog := left; backlog.Messages > 0; {
				time.Sleep(10 * time.Millisecond)
				if backlog, err = writer.Backlog(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msg/s")
			b.ReportMetric(float64(left.Messages), "backlog_at_end_of_writes")
		})
	}
}
