package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/store"
)

// Shape is an endpoint's handlers, for the footprint: handlers of one
// message type (bus.Named), each with the inbox, at a concurrency, with a
// batch size (1: no batching).
type Shape struct {
	Handlers, Concurrency, Batch int
}

func (s Shape) String() string {
	return fmt.Sprintf("handlers=%d concurrency=%d batch=%d", s.Handlers, s.Concurrency, s.Batch)
}

// Shapes are the two shapes the footprint targets are set for: many handlers, and
// few with large batches.
var Shapes = []Shape{{Handlers: 50, Concurrency: 8, Batch: 1}, {Handlers: 10, Concurrency: 8, Batch: 100}}

// Footprint is what one shape costs in one process: goroutines while idle,
// the peak heap and RSS through a burst, and the burst's rate.
type Footprint struct {
	Shape
	IdleGoroutines int
	PeakHeapMB     float64 // sampled every 20 ms
	PeakRSSMB      float64 // VmHWM: the process's whole life
	PerSecond      float64 // handlings (messages × handlers) per second
}

// GoroutineTarget is the bound on idle goroutines for s: handlers ×
// (concurrency + 10).
func (s Shape) GoroutineTarget() int { return s.Handlers * (s.Concurrency + 10) }

func (f Footprint) String() string {
	return fmt.Sprintf("footprint %s: %d goroutines idle (target ≤ %d), peak heap %.0f MB, peak RSS %.0f MB (target ≤ 100), %.0f handlings/s",
		f.Shape, f.IdleGoroutines, f.GoroutineTarget(), f.PeakHeapMB, f.PeakRSSMB, f.PerSecond)
}

// FootprintChildEnv names the shape a child process of the bench measures
// (RunFootprints re-executes the bench with it: a process's peak RSS is
// its own).
const FootprintChildEnv = "POSTROOM_BENCH_FOOTPRINT"

// RunFootprints measures each shape in a process of its own (this binary,
// run again with FootprintChildEnv) and prints a line per shape.
func RunFootprints(ctx context.Context, dsn string, messages int, out io.Writer) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	for _, s := range Shapes {
		cmd := exec.CommandContext(ctx, self)
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d,%d,%d,%d", FootprintChildEnv, s.Handlers, s.Concurrency, s.Batch, messages),
			"POSTROOM_POSTGRES_DSN="+dsn)
		cmd.Stderr = os.Stderr
		b, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("footprint %s: %w", s, err)
		}
		fmt.Fprint(out, string(b))
	}
	return nil
}

// FootprintChild measures the shape spec names ("handlers,concurrency,
// batch,messages") on a fresh schema of dsn, with the in-memory transport,
// and prints its line.
func FootprintChild(ctx context.Context, dsn, spec string, out io.Writer) error {
	var n [4]int
	parts := strings.Split(spec, ",")
	if len(parts) != len(n) {
		return fmt.Errorf("footprint: %q: want handlers,concurrency,batch,messages", spec)
	}
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil {
			return fmt.Errorf("footprint: %q: %w", spec, err)
		}
		n[i] = v
	}
	s, messages := Shape{Handlers: n[0], Concurrency: n[1], Batch: n[2]}, n[3]
	schema := fmt.Sprintf("bench_fp_%d", time.Now().UnixNano())
	admin, err := store.Open(dsn)
	if err != nil {
		return err
	}
	defer store.Close(admin)
	if err := admin.Exec("CREATE SCHEMA " + schema).Error; err != nil {
		return err
	}
	defer admin.Exec("DROP SCHEMA " + schema + " CASCADE")
	schemaDSN, err := withSearchPath(dsn, schema)
	if err != nil {
		return err
	}
	db, err := store.Open(schemaDSN)
	if err != nil {
		return err
	}
	defer store.Close(db)
	if _, err := store.Migrate(ctx, db, store.Tables{}); err != nil {
		return err
	}
	b, err := bus.New(bus.Config{Endpoint: "footprint", DB: db, Cleanup: bus.CleanupSchedule{Disabled: true}})
	if err != nil {
		return err
	}
	var handled atomic.Int64
	for i := range s.Handlers {
		opts := []bus.HandlerOption{bus.Named(fmt.Sprintf("h%d", i)), bus.WithInbox(), bus.WithConcurrency(s.Concurrency)}
		if s.Batch > 1 {
			opts = append(opts, bus.WithBatch(s.Batch, 10*time.Millisecond))
		}
		if err := bus.Handle(b, func(context.Context, *Work) error { handled.Add(1); return nil }, opts...); err != nil {
			return err
		}
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(runCtx) }()
	defer func() {
		stop()
		<-done
		_ = b.Close()
	}()
	select {
	case <-b.Running():
	case err := <-done:
		return fmt.Errorf("footprint: the bus stopped: %w", err)
	}
	time.Sleep(2 * time.Second) // idle: every subscription waiting
	f := Footprint{Shape: s, IdleGoroutines: runtime.NumGoroutine()}

	var peak atomic.Uint64
	sampled := make(chan struct{})
	sampling, endSampling := context.WithCancel(ctx)
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > peak.Load() {
				peak.Store(ms.HeapAlloc)
			}
			select {
			case <-sampling.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	start := time.Now()
	for i := range messages {
		if err := bus.Send(ctx, b, &Work{I: int64(i)}); err != nil {
			endSampling()
			return err
		}
	}
	want := int64(messages * s.Handlers)
	deadline := time.Now().Add(5 * time.Minute)
	for handled.Load() < want {
		if time.Now().After(deadline) {
			endSampling()
			return fmt.Errorf("footprint %s: %d of %d handled after 5 minutes", s, handled.Load(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
	f.PerSecond = float64(want) / time.Since(start).Seconds()
	endSampling()
	<-sampled
	f.PeakHeapMB = float64(peak.Load()) / (1 << 20)
	f.PeakRSSMB = peakRSSMB()
	fmt.Fprintln(out, f)
	return nil
}

// peakRSSMB is the process's peak resident set (VmHWM), 0 where /proc has
// none.
func peakRSSMB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}
