package drain_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/postroom/postroom/internal/drain"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestTryAddRefusesOnceTheStopBegan(t *testing.T) {
	t.Parallel()
	d := drain.New(time.Hour)
	require.True(t, d.TryAdd())
	require.False(t, d.Stopped())
	require.True(t, d.Stop())
	require.False(t, d.Stop(), "the stop begins once")
	require.True(t, d.Stopped())
	require.False(t, d.TryAdd())
	select {
	case <-d.Stopping():
	default:
		t.Fatal("Stopping is not closed")
	}
	d.Add() // counts even once stopped
	d.Done()
	d.Done()
	d.Wait(nil) // nothing held: returns
}

func TestWaitReturnsWhenSettledOrGivenUp(t *testing.T) {
	t.Parallel()
	d := drain.New(time.Hour)
	d.Wait(nil) // nothing handed out
	d.Add()
	give := make(chan struct{})
	close(give)
	d.Wait(give) // held, given up
	settled := make(chan struct{})
	go func() {
		d.Wait(nil)
		close(settled)
	}()
	select {
	case <-settled:
		t.Fatal("Wait returned while a hand-out is held")
	case <-time.After(20 * time.Millisecond):
	}
	d.Done()
	<-settled
}

func TestTheCutComesGraceAfterTheStop(t *testing.T) {
	t.Parallel()
	d := drain.New(time.Hour)
	d.Stop()
	require.NoError(t, d.Context().Err(), "cut before the grace passed")
	d.Cut()
	require.Error(t, d.Context().Err())

	d = drain.New(-1)
	require.NoError(t, d.Context().Err(), "cut before the stop")
	d.Stop()
	require.Error(t, d.Context().Err(), "a negative grace cuts at once")

	d = drain.New(time.Millisecond)
	d.Stop()
	<-d.Context().Done()
}
