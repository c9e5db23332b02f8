package bus

import (
	"cmp"
	"context"
	"time"

	"gorm.io/gorm"

	"github.com/postroom/postroom/handlers"
	"github.com/postroom/postroom/internal/dialect"
	"github.com/postroom/postroom/internal/metricseries"
	"github.com/postroom/postroom/metrics"
	"github.com/postroom/postroom/outbox"
	"github.com/postroom/postroom/scheduler"
	"github.com/postroom/postroom/store"
)

// scheduleCleanup registers the CleanupStore handler and returns the
// scheduler that sends it to this endpoint, one instance per slot.
func (b *Bus) scheduleCleanup() (*scheduler.Scheduler, error) {
	// Only Run calls it, and one Run at a time.
	if b.cleanup != nil { // a Run before this one failed after building it
		return b.cleanup, nil
	}
	sched, err := b.newCleanup()
	b.cleanup = sched
	return sched, err
}

// outboxTable names the outbox's messages table in the cleanup metric.
const outboxTable = "watermill_" + outbox.TopicDefault

func (b *Bus) newCleanup() (*scheduler.Scheduler, error) {
	// Only this endpoint's keys and watermarks: another endpoint on the
	// database may keep its own longer.
	ccfg := handlers.CleanupConfig{DB: b.cfg.DB, Logger: b.cfg.Logger, Now: b.cfg.Now, ConsumerPrefix: b.consumer("")}
	if b.outbox != nil {
		ccfg.OutboxTopic = outbox.TopicDefault
	}
	cleanup, err := handlers.NewCleanup(ccfg)
	if err != nil {
		return nil, err
	}
	tables := store.Tables{}.WithDefaults()
	purge := func(ctx context.Context, m *handlers.CleanupStore) error {
		// This endpoint's InboxRetention (checked against every handler's
		// redelivery horizon) is the least it keeps, whatever the message
		// asks (sent by hand, or by an instance with a shorter retention).
		now := b.cfg.Now()
		limit := now.Add(-b.cfg.InboxRetention)
		cutoff := m.Before
		if cutoff.IsZero() {
			cutoff = now.Add(-cmp.Or(m.Retention, b.cfg.InboxRetention))
		}
		if m.Retention < 0 {
			cutoff = time.Time{} // refused by Purge below, as before
		} else if cutoff.After(limit) {
			b.cfg.Logger.WarnContext(ctx, "cleanup: a CleanupStore asked to purge keys younger than this endpoint's InboxRetention: purging only the older ones",
				"asked_cutoff", cutoff, "cutoff", limit, "inbox_retention", b.cfg.InboxRetention)
			cutoff = limit
		}
		m = &handlers.CleanupStore{Before: cutoff, Retention: m.Retention, BatchSize: m.BatchSize, Pause: m.Pause}
		res, err := cleanup.Purge(ctx, *m)
		b.add(metrics.Count(metricseries.CleanupDeleted(tables.Inbox)), float64(res.Inbox))
		b.add(metrics.Count(metricseries.CleanupDeleted(tables.Watermarks)), float64(res.Watermarks))
		b.add(metrics.Count(metricseries.CleanupDeleted(dialect.DeliveriesTableDefault)), float64(res.Deliveries))
		if b.outbox != nil {
			b.add(metrics.Count(metricseries.CleanupDeleted(outboxTable)), float64(res.Outbox))
		}
		return err
	}
	if err := handle(b, purge, true); err != nil {
		return nil, err
	}
	return scheduler.New(scheduler.Config{
		DB:     b.cfg.DB,
		Logger: b.cfg.Logger,
		Now:    b.cfg.Now,
		OnFire: func(name string, emitted, missed int) {
			b.add(metrics.Count(metricseries.ScheduleMissed(name)), float64(missed))
			b.add(metrics.Count(metricseries.ScheduleFires(name)), float64(emitted)) // last: a reader that sees the fire sees its missed slots
		},
		Schedules: []scheduler.Schedule{{
			Name:  "postroom.cleanup." + b.cfg.Endpoint,
			Every: b.cfg.Cleanup.Interval,
		}},
		Emit: func(ctx context.Context, tx *gorm.DB, s scheduler.Schedule, slot time.Time) error {
			msg, _, err := b.newMessage(ctx, MessageName[handlers.CleanupStore](), &handlers.CleanupStore{
				Retention: b.cfg.InboxRetention,
				BatchSize: b.cfg.Cleanup.BatchSize,
				Pause:     b.cfg.Cleanup.Pause,
			}, []SendOption{WithMessageID(scheduler.SlotID(s.Name, slot))})
			if err != nil {
				return err
			}
			topic := commandTopic(b.cfg.Endpoint, MessageName[handlers.CleanupStore]())
			if b.outbox != nil {
				// Claimed and emitted in one transaction.
				return b.outbox.Publish(ctx, tx, topic, msg)
			}
			// Before the claim commits: a slot that fires again has the same
			// ID, and a repeat deletes nothing more.
			return b.cfg.Transport.Publisher().Publish(topic, msg)
		},
	})
}
