// Command postroom-bench measures postroom side by side with the database's
// own ceiling (the same SQL through pgx), the naive way and Watermill's
// Deduplicator, on PostgreSQL, in one run, and ends with a line of ratios.
// It lives in a module of its own (bench/), so that its chart code is no
// requirement of the library's module. From the repository's root:
//
//	cd bench && go run ./cmd/postroom-bench [-quick] [-sizing | -batch | -footprint] [-postgres DSN]
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"

	"github.com/postroom/postroom/bench/internal/bench"
)

func main() {
	quick := flag.Bool("quick", false, "a run of about a minute: fewer messages, one round")
	dsn := flag.String("postgres", cmp.Or(os.Getenv("POSTROOM_POSTGRES_DSN"), "postgres://postgres@127.0.0.1:5432/postroom_test?sslmode=disable"),
		"PostgreSQL DSN (env POSTROOM_POSTGRES_DSN)")
	amqpURL := flag.String("amqp", cmp.Or(os.Getenv("POSTROOM_AMQP_URL"), "amqp://guest:guest@127.0.0.1:5672/"),
		"RabbitMQ URL for the outbox relay run, empty to skip it (env POSTROOM_AMQP_URL)")
	chartsDir := flag.String("charts", "", "write throughput.png and growth.png to this folder (../docs/img for the docs, run from bench/)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	sizing := flag.Bool("sizing", false, "only the sizing figures: CPU per inbox message, bytes per inbox row (about 20 s)")
	batchOnly := flag.Bool("batch", false, "only the batching figures: the inbox ceiling, batched commits, the RabbitMQ path's inbox, the relay")
	footprint := flag.Bool("footprint", false, "only the footprint: goroutines idle, peak heap and RSS of two endpoint shapes, each in a process of its own (about a minute)")
	rounds := flag.Int("rounds", 5, "interleaved rounds of the raw and bus cases; the median counts (1 with -quick)")
	flag.Parse()
	if spec := os.Getenv(bench.FootprintChildEnv); spec != "" { // a child of -footprint
		if err := bench.FootprintChild(context.Background(), *dsn, spec, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "postroom-bench:", err)
			os.Exit(1)
		}
		return
	}
	if *footprint {
		if err := bench.RunFootprints(context.Background(), *dsn, 200, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "postroom-bench:", err)
			os.Exit(1)
		}
		return
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "postroom-bench:", err)
			os.Exit(1)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "postroom-bench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	cfg := bench.Config{PostgresDSN: *dsn, Messages: 8000, Rounds: *rounds, PurgeRows: 1_000_000, AMQPURL: *amqpURL, Out: os.Stdout,
		GrowthSizes: []int64{10_000, 1_000_000, 10_000_000}, ChartsDir: *chartsDir, SizingRows: 1_000_000, SizingOnly: *sizing, BatchOnly: *batchOnly}
	if *quick {
		cfg.Messages, cfg.Rounds, cfg.PurgeRows, cfg.GrowthSizes, cfg.SizingRows = 2000, 1, 200_000, []int64{10_000, 1_000_000}, 200_000
	}
	if *batchOnly {
		cfg.GrowthSizes, cfg.PurgeRows, cfg.SizingRows = nil, 0, 0
	}
	if *sizing {
		fmt.Printf("postroom-bench: sizing figures only, %d messages per measurement at concurrency 8, %d inbox rows\n",
			cfg.Messages, cfg.SizingRows)
	} else {
		fmt.Printf("postroom-bench: %d messages per measurement at concurrency 8 (%d at 1), median of %d rounds\n",
			cfg.Messages, max(cfg.Messages/4, 1), cfg.Rounds)
	}
	if _, err := bench.Run(context.Background(), cfg); err != nil {
		fmt.Fprintln(os.Stderr, "postroom-bench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}
