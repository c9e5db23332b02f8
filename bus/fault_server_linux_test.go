//go:build linux

package bus_test

import (
	"context"
	"database/sql"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// serverProcess is a database server a fault test runs as its own child
// process (startPrivatePostgres, startPrivateMariaDB), to stop, kill and
// start again without touching the servers other tests share.
type serverProcess struct {
	name   string       // for failures: "postgres", "mariadbd"
	ping   func() error // nil once the server answers
	log    func() string
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

// launch starts cmd, killed when the test binary dies, and waits until
// the server answers its ping: a minute at most.
func (s *serverProcess) launch(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	require.NoError(t, cmd.Start(), "start %s", s.name)
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.cmd, s.exited = cmd, exited
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := s.ping()
		if err == nil {
			return
		}
		select {
		case <-exited:
			t.Fatalf("%s exited (%s) before it answered: %v\n%s", s.name, cmd.ProcessState, err, s.log())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer within 60 s: %v\n%s", s.name, err, s.log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// signal sends sig to the server and waits until it has exited.
func (s *serverProcess) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	require.NoError(t, s.cmd.Process.Signal(sig))
	select {
	case <-s.exited:
	case <-time.After(60 * time.Second):
		s.kill()
		t.Fatalf("%s did not exit within 60 s of %v\n%s", s.name, sig, s.log())
	}
}

// kill kills the server if it runs, and waits until it has exited.
func (s *serverProcess) kill() {
	if s.cmd == nil {
		return
	}
	select {
	case <-s.exited:
	default:
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// pingDB connects to dsn with driver and pings it, in 2 s at most.
func pingDB(driver, dsn string) error {
	conn, err := sql.Open(driver, dsn)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return conn.PingContext(ctx)
}
