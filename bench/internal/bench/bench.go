package bench

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postroom/postroom/store"
)

// Kind is one way of handling a message.
type Kind string

// The kinds measured.
const (
	Plain        Kind = "plain"        // business insert in its own transaction
	Inbox        Kind = "inbox"        // + inbox key in the same transaction
	InboxStale   Kind = "inbox+stale"  // + watermark upsert in the same transaction
	Naive        Kind = "naive"        // SELECT to check, insert, INSERT the key afterwards; no unique key
	Deduplicator Kind = "deduplicator" // Watermill's in-memory Deduplicator around the plain handler
	InboxBatch   Kind = "inbox+batch"  // inbox handler with batched commits (bus.WithBatch, batchDefault)
	// BatchHandler is a batch handler (bus.HandleBatch, batchDefault): the
	// batch's inbox keys in one statement, its business rows in another.
	BatchHandler Kind = "inbox+batch_handler"
)

// Config configures a run.
type Config struct {
	// PostgresDSN is the database; the run works in a schema of its own and drops it.
	PostgresDSN string
	// Messages per measurement at concurrency 8; a quarter of that at concurrency 1.
	Messages int64
	// Rounds repeats every measurement; the median counts.
	Rounds int
	// ChartsDir receives throughput.png and growth.png ("" skips them).
	ChartsDir string
	// GrowthSizes are the inbox sizes of the growth run (nil skips it).
	GrowthSizes []int64
	// AMQPURL is RabbitMQ, for the RabbitMQ and outbox relay runs ("" skips them).
	AMQPURL string
	// PurgeRows is how many expired inbox rows the cleanup run purges (0: skip it).
	PurgeRows int64
	// SizingRows is how many inbox rows the bytes-per-row figure is
	// measured on (0: skip the sizing figures).
	SizingRows int64
	// SizingOnly runs the sizing figures alone: CPU per message and bytes
	// per inbox row.
	SizingOnly bool
	// BatchOnly runs the batching figures alone: the raw pgx inbox ceiling
	// and the bus's inbox at concurrency 8, batched commits, the RabbitMQ
	// path's inbox cases (hand-rolled, bus, bus batched) and the relay.
	BatchOnly bool
	// Out receives the table.
	Out io.Writer
}

// Result is the throughput of one kind, path and concurrency.
type Result struct {
	Path        string // "raw" (pgx) or "bus"
	Kind        Kind
	Concurrency int
	PerSecond   float64
}

// Run measures everything and prints a table and the ratio line.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	schema := fmt.Sprintf("bench_%d", time.Now().UnixNano())
	admin, err := store.Open(cfg.PostgresDSN)
	if err != nil {
		return nil, err
	}
	defer store.Close(admin)
	if err := admin.Exec("CREATE SCHEMA " + schema).Error; err != nil {
		return nil, err
	}
	defer admin.Exec("DROP SCHEMA " + schema + " CASCADE")
	// The schema's name is also the connections' application_name: the
	// sizing figures count the CPU of their backends.
	dsn, err := withSearchPath(cfg.PostgresDSN, schema)
	if err != nil {
		return nil, err
	}
	db, err := store.Open(dsn)
	if err != nil {
		return nil, err
	}
	defer store.Close(db)
	if sqlDB, err := db.DB(); err == nil {
		sqlDB.SetMaxOpenConns(16)
		sqlDB.SetMaxIdleConns(16)
	}
	if _, err := store.Migrate(ctx, db, store.Tables{}); err != nil {
		return nil, err
	}
	for _, stmt := range []string{createBusiness, createProcessed} {
		if err := db.Exec(stmt).Error; err != nil {
			return nil, err
		}
	}
	pool, err := pgxpool.New(ctx, dsn+"&pool_max_conns=16")
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if cfg.SizingOnly {
		return nil, runSizing(ctx, admin, db, pool, schema, cfg.Messages, max(cfg.SizingRows, 1), cfg.Out)
	}

	// Every round measures every case once, in the same order, and the
	// median of the rounds counts: drift over the run (autovacuum, a noisy
	// neighbour) touches every case alike.
	type key struct {
		path string
		kind Kind
		conc int
	}
	var order []key
	for _, conc := range []int{1, 8} {
		if cfg.BatchOnly {
			order = []key{{"raw", Inbox, 8}, {"bus", Inbox, 8}}
			break
		}
		for _, kind := range []Kind{Plain, Inbox, InboxStale, Naive} {
			order = append(order, key{"raw", kind, conc})
		}
		for _, kind := range []Kind{Plain, Inbox, InboxStale, Naive, Deduplicator} {
			order = append(order, key{"bus", kind, conc})
		}
	}
	order = append(order, key{"bus", InboxBatch, 8}, key{"bus", BatchHandler, 8})
	times := map[key][]time.Duration{}
	for round := range max(cfg.Rounds, 1) {
		fmt.Fprintf(cfg.Out, "  round %d of %d\n", round+1, max(cfg.Rounds, 1))
		for _, k := range order {
			n := cfg.Messages
			if k.conc == 1 {
				n = max(cfg.Messages/4, 1)
			}
			d, err := warmedUp(db, n, func(n int64, _ bool) (time.Duration, error) {
				if k.path == "raw" {
					return runRaw(ctx, pool, rawOps[k.kind], k.conc, n)
				}
				return runE2E(ctx, db, k.kind, k.conc, n)
			})
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", k.path, k.kind, err)
			}
			times[k] = append(times[k], time.Duration(float64(d)/float64(n)*float64(cfg.Messages)))
		}
	}
	var results []Result
	for _, k := range order {
		ds := times[k]
		slices.Sort(ds)
		results = append(results, Result{k.path, k.kind, k.conc, float64(cfg.Messages) / ds[len(ds)/2].Seconds()})
	}
	report(cfg.Out, results)
	ratios := Ratios(results)
	// The order first: inbox, stale, ceiling, growth, purge; then the extras.
	line := fmt.Sprintf("ratios: inbox/plain=%.2f inbox_share=%.2f stale/inbox=%.2f stale_share=%.2f framework/ceiling=%.2f",
		ratios["inbox/plain"], ratios["inbox_share"], ratios["stale/inbox"], ratios["stale_share"], ratios["framework/ceiling"])
	if cfg.BatchOnly {
		line = fmt.Sprintf("ratios: framework/ceiling=%.2f", ratios["framework/ceiling"])
	}
	// The batching ratios, after the others.
	var batching, extras string
	batch, err := runBatch(ctx, db, pool, cfg.Messages, cfg.Rounds, find(results, "raw", Inbox, 8), cfg.Out)
	if err != nil {
		return nil, fmt.Errorf("batch: %w", err)
	}
	batching += fmt.Sprintf(" batch/ceiling=%.2f batch_handler/ceiling=%.2f batch_p99/bound=%.2f", ratios["batch/ceiling"], ratios["batch_handler/ceiling"],
		float64(batch.P99)/float64(batchDefault.maxWait+2*batch.Raw.Commit))
	var sqliteRates map[Kind]float64
	if !cfg.BatchOnly {
		if err := runRedelivery(ctx, db, cfg.Messages/4, cfg.Out); err != nil {
			return nil, err
		}
		if sqliteRates, err = runSQLite(ctx, cfg.Messages, cfg.Out); err != nil {
			return nil, err
		}
	}
	var rabbit RabbitResult
	if cfg.AMQPURL != "" {
		kinds := busKinds
		if cfg.BatchOnly {
			kinds = []Kind{Inbox}
		}
		meter := cpuMeter{admin: admin, app: schema}
		if rabbit, err = runRabbitMQ(ctx, db, pool, meter, cfg.AMQPURL, kinds, cfg.Messages, cfg.Rounds, cfg.Out); err != nil {
			return nil, err
		}
		ceiling := find(results, "raw", Inbox, 8)
		batching += fmt.Sprintf(" amqp/raw_amqp=%.2f amqp/ceiling=%.2f amqp_batch/ceiling=%.2f amqp_batch_handler/ceiling=%.2f",
			rabbit.Bus[Inbox]/rabbit.Raw, rabbit.Bus[Inbox]/ceiling, rabbit.Bus[InboxBatch]/ceiling, rabbit.Bus[BatchHandler]/ceiling)
		r, err := runRelay(ctx, db, cfg.AMQPURL, cfg.Messages, cfg.Out)
		if err != nil {
			return nil, fmt.Errorf("outbox: %w", err)
		}
		batching += fmt.Sprintf(" relay/handlers=%.2f", r.RelayPerSecond/r.WithOneSend)
		extras += fmt.Sprintf(" outbox_send/no_send=%.2f relay_msg_s=%.0f", r.WithOneSend/r.WithoutSends, r.RelayPerSecond)
	}
	var growth []growthPoint
	if len(cfg.GrowthSizes) > 1 {
		if growth, err = runGrowth(ctx, db, cfg.GrowthSizes, cfg.Messages, cfg.Out); err != nil {
			return nil, fmt.Errorf("growth: %w", err)
		}
		first, last := growth[0], growth[len(growth)-1]
		line += fmt.Sprintf(" growth_p50_%s/%s=%.2f", short(last.rows), short(first.rows), float64(last.p50)/float64(first.p50))
	}
	if cfg.PurgeRows > 0 {
		p, err := runPurge(ctx, db, cfg.PurgeRows, cfg.Messages, cfg.Out)
		if err != nil {
			return nil, fmt.Errorf("purge: %w", err)
		}
		line += fmt.Sprintf(" purge_p99/base=%.2f", float64(p.DuringP99)/float64(p.BaseP99))
	}
	if cfg.SizingRows > 0 {
		if err := runSizing(ctx, admin, db, pool, schema, cfg.Messages, cfg.SizingRows, cfg.Out); err != nil {
			return nil, err
		}
	}
	line += batching + extras
	if cfg.ChartsDir != "" {
		if err := charts(cfg.ChartsDir, results, sqliteRates, rabbit, growth, batch); err != nil {
			return nil, fmt.Errorf("charts: %w", err)
		}
		fmt.Fprintf(cfg.Out, "charts: %s/throughput.png, %s/growth.png, %s/batch.png\n", cfg.ChartsDir, cfg.ChartsDir, cfg.ChartsDir)
	}
	fmt.Fprintln(cfg.Out, line)
	return results, nil
}

func withSearchPath(dsn, schema string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set("search_path", schema)
	q.Set("application_name", schema)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func find(results []Result, path string, kind Kind, conc int) float64 {
	for _, r := range results {
		if r.Path == path && r.Kind == kind && r.Concurrency == conc {
			return r.PerSecond
		}
	}
	return 0
}

// Ratios computes the figures of the ratio line at concurrency 8.
func Ratios(results []Result) map[string]float64 {
	raw := func(k Kind) float64 { return find(results, "raw", k, 8) }
	e2e := func(k Kind) float64 { return find(results, "bus", k, 8) }
	inboxPlain := e2e(Inbox) / e2e(Plain)
	staleInbox := e2e(InboxStale) / e2e(Inbox)
	return map[string]float64{
		"inbox/plain":           inboxPlain,
		"inbox_share":           inboxPlain / (raw(Inbox) / raw(Plain)),
		"stale/inbox":           staleInbox,
		"stale_share":           staleInbox / (raw(InboxStale) / raw(Inbox)),
		"framework/ceiling":     e2e(Inbox) / raw(Inbox),
		"batch/ceiling":         e2e(InboxBatch) / raw(Inbox),
		"batch_handler/ceiling": e2e(BatchHandler) / raw(Inbox),
	}
}

func report(out io.Writer, results []Result) {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "path\tkind\tconcurrency\tmsg/s\t")
	for _, r := range results {
		fmt.Fprintf(w, "%s\t%s\t%d\t%.0f\t\n", r.Path, r.Kind, r.Concurrency, r.PerSecond)
	}
	w.Flush()
	if find(results, "raw", Plain, 8) == 0 { // -batch: the inbox alone
		return
	}
	fmt.Fprintf(out, "raw sql at concurrency 8: inbox/plain=%.2f stale/inbox=%.2f\n",
		find(results, "raw", Inbox, 8)/find(results, "raw", Plain, 8), find(results, "raw", InboxStale, 8)/find(results, "raw", Inbox, 8))
}

// short writes 10000 as 10k and 1000000 as 1M.
func short(n int64) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

// charts draws throughput per variant at concurrency 8, latency against
// the inbox's size, and throughput against batch size.
func charts(dir string, results []Result, sqliteRates map[Kind]float64, rabbit RabbitResult, growth []growthPoint, batch BatchResult) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var bars []bar
	for _, r := range results {
		if r.Concurrency != 8 {
			continue
		}
		c, label := busColor, "bus "+string(r.Kind)
		if r.Path == "raw" {
			c, label = rawColor, "raw pgx "+string(r.Kind)
		}
		bars = append(bars, bar{label + " (postgres)", r.PerSecond, "msg/s", c})
	}
	for _, set := range []struct {
		name  string
		rates map[Kind]float64
	}{{"sqlite", sqliteRates}, {"rabbitmq", rabbit.Bus}} {
		for _, kind := range append(busKinds, InboxBatch) {
			if v, ok := set.rates[kind]; ok {
				bars = append(bars, bar{"bus " + string(kind) + " (" + set.name + ")", v, "msg/s", otherColor})
			}
		}
	}
	if rabbit.Raw > 0 {
		bars = append(bars, bar{"amqp091+pgx inbox (rabbitmq)", rabbit.Raw, "msg/s", rawColor})
	}
	if err := barChart(filepath.Join(dir, "throughput.png"), "Throughput at concurrency 8 (msg/s; grey: raw SQL ceiling, blue: postroom on PostgreSQL, orange: other stores/brokers)", bars); err != nil {
		return err
	}
	bars = nil
	for _, g := range growth {
		bars = append(bars,
			bar{fmt.Sprintf("p50 with %s rows", short(g.rows)), float64(g.p50.Microseconds()) / 1000, "ms", busColor},
			bar{fmt.Sprintf("p99 with %s rows", short(g.rows)), float64(g.p99.Microseconds()) / 1000, "ms", p99Color})
	}
	if len(bars) > 0 {
		if err := barChart(filepath.Join(dir, "growth.png"), "Inbox handler latency against rows already in the inbox (ms, concurrency 8)", bars); err != nil {
			return err
		}
	}
	if len(batch.PerSecond) == 0 {
		return nil
	}
	bars = []bar{{"raw pgx inbox, 1 per commit", find(results, "raw", Inbox, 8), "msg/s", rawColor}}
	for _, size := range batchSizes {
		bars = append(bars, bar{fmt.Sprintf("bus inbox, batch size %d", size), batch.PerSecond[size], "msg/s", busColor})
	}
	for _, size := range batchSizes {
		bars = append(bars, bar{fmt.Sprintf("batch handler, size %d", size), batch.HandlerPerSecond[size], "msg/s", p99Color})
	}
	return barChart(filepath.Join(dir, "batch.png"), "Inbox throughput against batch size (msg/s, in-memory transport, PostgreSQL, concurrency 8)", bars)
}
