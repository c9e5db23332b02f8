package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"gorm.io/gorm"

	"github.com/postroom/postroom/transport/gochannel"
)

// The shape of the inbox rows the sizing run writes: what the bus writes
// for handler CreateInvoice of endpoint billing, receiving an event of
// endpoint sales with the bus's own 36-character UUIDv7 message ID.
const (
	sizingConsumer = "billing/billing.CreateInvoice"
	sizingSource   = "sales"
	sizingType     = "sales.OrderPlaced"
)

// runSizing prints the figures that size a deployment: the CPU one inbox
// message costs this process and PostgreSQL's backends at concurrency 8
// (raw pgx and the bus, n messages each, after a warm-up), and the bytes
// one inbox row takes on disk, table and indexes, with rows rows in it.
// app is the application_name of the run's connections: their backends
// are the ones counted.
func runSizing(ctx context.Context, admin, db *gorm.DB, pool *pgxpool.Pool, app string, n, rows int64, out io.Writer) error {
	raw, viaBus := &cpuMeter{admin: admin, app: app}, &cpuMeter{admin: admin, app: app}
	cases := []struct {
		meter *cpuMeter
		run   func(m int64, meter *cpuMeter) error
	}{
		{raw, func(m int64, meter *cpuMeter) error {
			if err := meter.start(ctx); err != nil {
				return err
			}
			if _, err := runRaw(ctx, pool, rawOps[Inbox], 8, m); err != nil {
				return err
			}
			return meter.stop(ctx)
		}},
		{viaBus, func(m int64, meter *cpuMeter) error {
			_, err := runE2EWith(ctx, gochannel.New(gochannel.Config{}), db, Inbox, 8, m, e2eOptions{meter: meter})
			return err
		}},
	}
	for _, measured := range []bool{false, true} { // a warm-up first, not measured
		for _, c := range cases {
			if err := db.Exec(truncateAll).Error; err != nil {
				return err
			}
			m, meter := max(n/4, 1), (*cpuMeter)(nil)
			if measured {
				m, meter = n, c.meter
			}
			if err := c.run(m, meter); err != nil {
				return fmt.Errorf("sizing: %w", err)
			}
		}
	}
	perMsg := func(d []time.Duration) float64 { return float64(d[0].Microseconds()) / float64(n) }
	rate := func(m *cpuMeter) float64 { return float64(n) / m.Wall[0].Seconds() }
	line := fmt.Sprintf("sizing: inbox at concurrency 8, %d messages (raw pgx | bus): %.0f | %.0f msg/s; CPU per message: this process %.0f | %.0f µs",
		n, rate(raw), rate(viaBus), perMsg(raw.Proc), perMsg(viaBus.Proc))
	if raw.pgSeen && viaBus.pgSeen {
		both := func(m *cpuMeter) float64 { return perMsg(m.Proc) + perMsg(m.Postgres) }
		line += fmt.Sprintf(", PostgreSQL backends %.0f | %.0f µs; msg/s per core of both: %.0f | %.0f",
			perMsg(raw.Postgres), perMsg(viaBus.Postgres), 1e6/both(raw), 1e6/both(viaBus))
	} else {
		line += " (PostgreSQL's backends are not on this machine: not counted)"
	}
	fmt.Fprintln(out, line)
	return rowSize(admin, db, rows, out)
}

// rowSize fills the inbox with rows rows shaped as the bus writes them and
// prints the bytes they take.
func rowSize(admin, db *gorm.DB, rows int64, out io.Writer) error {
	if err := db.Exec(truncateAll).Error; err != nil {
		return err
	}
	// The IDs ascend, as UUIDv7 do: a counter in the first 8 of 36 characters.
	if err := db.Exec(`INSERT INTO postroom_inbox (consumer, source, message_id, message_type, received_at)
		SELECT ?, ?, overlay(gen_random_uuid()::text placing lpad(to_hex(g), 8, '0') from 1 for 8), ?, now()
		FROM generate_series(1, ?::bigint) g`, sizingConsumer, sizingSource, sizingType, rows).Error; err != nil {
		return err
	}
	if err := db.Exec("VACUUM ANALYZE postroom_inbox").Error; err != nil {
		return err
	}
	var table, indexes, total int64
	if err := db.Raw(`SELECT pg_table_size('postroom_inbox'), pg_indexes_size('postroom_inbox'), pg_total_relation_size('postroom_inbox')`).
		Row().Scan(&table, &indexes, &total); err != nil {
		return err
	}
	mb := func(b int64) string { return fmt.Sprintf("%.1f MB", float64(b)/1e6) }
	fmt.Fprintf(out, "sizing: inbox rows as the bus writes them (consumer %d B, source %d B, message_id 36 B, message_type %d B), %d rows after VACUUM: table %s, indexes %s, total %s: %.0f bytes per row\n",
		len(sizingConsumer), len(sizingSource), len(sizingType), rows, mb(table), mb(indexes), mb(total), float64(total)/float64(rows))
	return db.Exec(truncateAll).Error
}

// cpuMeter adds up the CPU time of this process and of the PostgreSQL
// backends whose application_name is app, between start and stop; and,
// with broker set, of RabbitMQ's Erlang VM (every process named beam.smp
// on this machine, whoever uses it).
type cpuMeter struct {
	admin  *gorm.DB // asks pg_stat_activity, on a connection not measured
	app    string
	broker bool

	wall0   time.Time
	proc0   time.Duration
	pg0     map[int]time.Duration
	broker0 time.Duration
	pgSeen  bool // the backends' /proc entries were readable

	Wall, Proc, Postgres, Broker []time.Duration // one per start/stop
}

// start notes the CPU used so far. A nil meter measures nothing.
func (m *cpuMeter) start(ctx context.Context) error {
	if m == nil {
		return nil
	}
	pg, err := m.backends(ctx)
	if err != nil {
		return err
	}
	if m.broker {
		m.broker0 = brokerCPU()
	}
	m.pg0, m.proc0, m.wall0 = pg, processCPU(), time.Now()
	return nil
}

// stop adds the CPU used since start.
func (m *cpuMeter) stop(ctx context.Context) error {
	if m == nil {
		return nil
	}
	wall, proc := time.Since(m.wall0), processCPU()-m.proc0
	if m.broker {
		m.Broker = append(m.Broker, brokerCPU()-m.broker0)
	}
	pg, err := m.backends(ctx)
	if err != nil {
		return err
	}
	var used time.Duration
	for pid, t := range pg {
		used += t - m.pg0[pid] // a backend started since start counts from zero
	}
	m.Wall, m.Proc, m.Postgres = append(m.Wall, wall), append(m.Proc, proc), append(m.Postgres, used)
	return nil
}

// backends returns the CPU time so far of each backend of the run.
func (m *cpuMeter) backends(ctx context.Context) (map[int]time.Duration, error) {
	var pids []int
	if err := m.admin.WithContext(ctx).Raw("SELECT pid FROM pg_stat_activity WHERE application_name = ?", m.app).Scan(&pids).Error; err != nil {
		return nil, err
	}
	cpu := map[int]time.Duration{}
	m.pgSeen = len(pids) > 0
	for _, pid := range pids {
		t, err := pidCPU(pid)
		if err != nil {
			m.pgSeen = false // the server is elsewhere, or in another PID namespace
			continue
		}
		cpu[pid] = t
	}
	return cpu, nil
}

// brokerCPU is the CPU time so far of the processes named beam.smp
// (RabbitMQ's Erlang VM), 0 where there are none or /proc cannot be read.
func brokerCPU() time.Duration {
	stats, _ := filepath.Glob("/proc/[0-9]*/comm")
	var total time.Duration
	for _, f := range stats {
		comm, err := os.ReadFile(f)
		if err != nil || strings.TrimSpace(string(comm)) != "beam.smp" {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(f)))
		if err != nil {
			continue
		}
		if t, err := pidCPU(pid); err == nil {
			total += t
		}
	}
	return total
}

// processCPU is the user and system CPU time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clockTick is USER_HZ, the unit of /proc/PID/stat's times (100 on Linux).
const clockTick = 10 * time.Millisecond

// pidCPU reads the user and system CPU time of a process from /proc.
func pidCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name, which is in parentheses and may hold spaces.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, errors.New("unexpected /proc stat format")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("unexpected /proc stat format")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14; f[0] is field 3
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * clockTick, nil
}
