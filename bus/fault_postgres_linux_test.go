//go:build linux

package bus_test

import (
	"database/sql"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", for ping
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
)

var faultDB = flag.Bool("fault.db", false, "run TestDatabaseRestartedMidRun and TestDatabaseOutageOfAMinute, which restart and stop a PostgreSQL server of their own (scripts/test.sh runs them apart from the other tests: they load the machine)")

// TestDatabaseRestartedMidRun: PostgreSQL restarts while two consumer
// processes work. Handlers fail, retry in process with backoff, and the run
// converges: every message exactly once. The server is the test's own
// (startPrivatePostgres); it runs with -fault.db (scripts/test.sh).
func TestDatabaseRestartedMidRun(t *testing.T) {
	if !*faultDB {
		t.Skip("restarts a PostgreSQL server of its own for a long run: run with -fault.db, as scripts/test.sh does")
	}
	srv := startPrivatePostgres(t)
	p := privatePostgresSetup(t, srv).withSender(t)
	consumers := []*consumer{
		startConsumer(t, p.dsn, p.url, p.endpoint, 0),
		startConsumer(t, p.dsn, p.url, p.endpoint, 0),
	}
	const messages = 1500
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for n := range messages {
			p.send(t, n)
			time.Sleep(time.Millisecond)
		}
	}()
	time.Sleep(time.Second)
	srv.restart(t)
	<-sent
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var distinct int64
		// The test's own pool reconnects too.
		if err := p.db.Raw("SELECT COUNT(DISTINCT n) FROM effects").Scan(&distinct).Error; err == nil && distinct == messages {
			break
		}
		require.True(t, time.Now().Before(deadline), "did not converge after the restart")
		time.Sleep(100 * time.Millisecond)
	}
	for _, c := range consumers {
		c.stop(t)
	}
	rows, distinct := p.effects(t)
	require.EqualValues(t, messages, distinct, "nothing lost")
	require.EqualValues(t, messages, rows, "nothing doubled")
}

// TestDatabaseOutageOfAMinute: PostgreSQL is stopped for 60 seconds while
// three consumer processes, with the default retry policy (3 retries, about
// 0.7 s), handle a steady stream. Rate limiting waits the outage out: no
// message reaches the error topic, none is lost or applied twice, and the
// backlog is handled within two minutes of the restart. The server is the
// test's own; it runs with -fault.db (scripts/test.sh).
func TestDatabaseOutageOfAMinute(t *testing.T) {
	if !*faultDB {
		t.Skip("stops a PostgreSQL server of its own for a minute: run with -fault.db, as scripts/test.sh does")
	}
	srv := startPrivatePostgres(t)
	p := privatePostgresSetup(t, srv).withSender(t)
	errorTopic := testenv.Name("error_")
	deleteErrorQueue(t, errorTopic)
	env := []string{childDefault + "=1", childErrors + "=" + errorTopic}
	var consumers []*consumer
	for range 3 {
		consumers = append(consumers, startChild(t, "consumer", p.dsn, p.url, p.endpoint, 0, env...))
	}
	const messages = 2000 // one every 40 ms: 80 s of steady load around the outage
	sent := p.steadyStream(t, messages)
	time.Sleep(5 * time.Second)
	srv.stop(t)
	time.Sleep(60 * time.Second)
	srv.start(t)
	restarted := time.Now()
	<-sent
	deadline := restarted.Add(2 * time.Minute)
	for {
		var distinct int64
		if err := p.db.Raw("SELECT COUNT(DISTINCT n) FROM effects").Scan(&distinct).Error; err == nil && distinct == messages {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the backlog was not handled within two minutes of the restart: %s", p.whereAreMissing(t, messages, errorTopic))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("every message handled %s after PostgreSQL started again", time.Since(restarted).Round(time.Second))
	for _, c := range consumers {
		c.stop(t)
	}
	rows, distinct := p.effects(t)
	require.EqualValues(t, messages, distinct, "nothing lost")
	require.EqualValues(t, messages, rows, "nothing doubled")

	require.Zero(t, errorQueueLength(t, p.url, errorTopic), "no message reached the error topic")
}

// privatePostgresSetup is the process setup of the PostgreSQL and
// RabbitMQ tests, on srv's database.
func privatePostgresSetup(t *testing.T, srv *pgServer) processSetup {
	db := testenv.Migrated(t, srv.dsn(), "the test's own PostgreSQL")
	require.NoError(t, db.Exec("CREATE TABLE effects (message_id VARCHAR(100) NOT NULL, n INTEGER NOT NULL)").Error)
	p := processSetup{dsn: srv.dsn(), endpoint: testenv.Name("proc"), db: db, transport: "amqp", url: testenv.RequireAMQP(t)}
	deleteChildQueues(t, p.endpoint)
	return p
}

// pgServer is a PostgreSQL server of the test's own, on a data directory
// in a temp dir and a free port: the fault tests stop, kill and restart it
// without touching the server other tests share.
type pgServer struct {
	serverProcess
	bin, dir string
	port     int
	cred     *syscall.Credential // the postgres user's, when the test runs as root
}

const postgresMissing = "needs PostgreSQL's initdb and postgres (Debian's postgresql, in /usr/lib/postgresql/<version>/bin): " +
	"scripts/services.sh installs it; otherwise apt-get install postgresql"

// startPrivatePostgres creates a cluster (initdb: trust, UTF-8) in a temp
// dir and starts a server on it with a database "postroom"; the server is
// killed when the test ends, or when the test binary dies.
func startPrivatePostgres(t *testing.T) *pgServer {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Slice(bins, func(i, j int) bool { return pgMajor(bins[i]) < pgMajor(bins[j]) })
	if len(bins) == 0 {
		t.Fatalf("%s %s", t.Name(), postgresMissing)
	}
	bindir := filepath.Dir(bins[len(bins)-1])
	// Not t.TempDir: when the test runs as root the server runs as the
	// postgres user, who cannot enter the test's private temp dirs.
	dir, err := os.MkdirTemp("", "postroom-fault-pg-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	s := &pgServer{bin: filepath.Join(bindir, "postgres"), dir: dir, port: portBelowEphemeral(t)}
	s.serverProcess = serverProcess{name: "postgres", ping: s.ping, log: s.serverLog}
	if os.Geteuid() == 0 { // initdb and postgres refuse to run as root
		u, err := user.Lookup("postgres")
		require.NoError(t, err, "the test runs as root and the server must not: needs the postgres user (Debian's postgresql creates it)")
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		require.NoError(t, os.Chown(dir, uid, gid))
	}
	initdb := exec.Command(filepath.Join(bindir, "initdb"), "-D", filepath.Join(dir, "data"), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync")
	initdb.Dir = dir
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	out, err := initdb.CombinedOutput()
	require.NoError(t, err, "initdb: %s", out)
	t.Cleanup(s.kill)
	s.start(t)
	conn, err := sql.Open("pgx", s.url("postgres"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Exec("CREATE DATABASE postroom")
	require.NoError(t, err)
	return s
}

// pgMajor is the major version in a path /usr/lib/postgresql/<major>/….
func pgMajor(path string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
	return n
}

func (s *pgServer) url(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, database)
}

// dsn is the DSN of the server's database "postroom".
func (s *pgServer) dsn() string { return s.url("postroom") }

// start starts the server on its data directory and waits until it
// answers.
func (s *pgServer) start(t *testing.T) {
	t.Helper()
	cmd := exec.Command(s.bin, "-D", filepath.Join(s.dir, "data"), "-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+s.dir,
		"-c", "max_connections=300", "-c", "fsync=off", "-c", "shared_buffers=32MB")
	cmd.Dir = s.dir
	log, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(t, err)
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	s.launch(t, cmd)
}

func (s *pgServer) ping() error { return pingDB("pgx", s.url("postgres")+"&connect_timeout=1") }

// stop shuts the server down (SIGINT: PostgreSQL's fast shutdown, which
// ends every session as pg_ctl stop does) and waits until it has exited.
func (s *pgServer) stop(t *testing.T) {
	t.Helper()
	s.signal(t, syscall.SIGINT)
}

// restart stops the server and starts it again on the same port.
func (s *pgServer) restart(t *testing.T) {
	t.Helper()
	s.stop(t)
	s.start(t)
}

// serverLog is the server's log, for a failure's message.
func (s *pgServer) serverLog() string {
	b, err := os.ReadFile(filepath.Join(s.dir, "server.log"))
	if err != nil {
		return fmt.Sprintf("(no server log: %v)", err)
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}
