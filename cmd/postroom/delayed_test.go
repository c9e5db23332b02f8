package main

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/internal/storeinfo"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/store"
)

type Reminder struct{}

func (Reminder) MessageName() string { return "test.Reminder" }

// TestDelayedList: a message sent for later is listed with its due time
// and topic, earliest due first.
func TestDelayedList(t *testing.T) {
	dsn := "sqlite:" + t.TempDir() + "/delayed.db"
	db, err := store.Open(dsn)
	require.NoError(t, err)
	t.Cleanup(func() { store.Close(db) })
	_, err = store.Migrate(context.Background(), db, store.Tables{})
	require.NoError(t, err)
	b, err := bus.New(bus.Config{Endpoint: "reminders", DB: db, Logger: testenv.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	due := time.Now().Add(time.Hour).UTC()
	require.NoError(t, bus.Publish(context.Background(), b, &Reminder{}, bus.WithMessageID("later"), bus.DeliverAt(due.Add(time.Minute))))
	require.NoError(t, bus.Publish(context.Background(), b, &Reminder{}, bus.WithMessageID("sooner"), bus.DeliverAt(due)))

	out, err := run(t, "delayed", "list", "--dsn", dsn, "--json")
	require.NoError(t, err)
	var rows []storeinfo.Delayed
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 2)
	require.Equal(t, "sooner", rows[0].MessageID)
	require.Equal(t, "later", rows[1].MessageID)
	require.WithinDuration(t, due, rows[0].DueAt, time.Millisecond)
	require.Equal(t, bus.EventTopic("test.Reminder"), rows[0].Topic)
	require.Empty(t, rows[0].TargetGroup)

	out, err = run(t, "delayed", "list", "--dsn", dsn)
	require.NoError(t, err)
	require.Contains(t, out, "sooner")
}

// TestMissingSQLiteFileIsNotCreated: a command other than migrate given a
// SQLite path that does not exist fails and creates nothing.
func TestMissingSQLiteFileIsNotCreated(t *testing.T) {
	path := t.TempDir() + "/billing.db"
	_, err := run(t, "delayed", "list", "--dsn", path)
	require.ErrorContains(t, err, "no SQLite database at "+path)
	_, statErr := os.Stat(path)
	require.True(t, errors.Is(statErr, fs.ErrNotExist), "no file was created")
}
