package main

import (
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

// leaves returns every command that runs something, by path without "postroom ".
func leaves(t *testing.T) map[string]*cobra.Command {
	t.Helper()
	root, _ := newRoot(io.Discard, io.Discard)
	out := map[string]*cobra.Command{}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if !c.HasSubCommands() {
			out[strings.TrimPrefix(c.CommandPath(), "postroom ")] = c
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return out
}

// TestHelpNeverShowsSecrets: the DSN and broker URL of the environment,
// passwords included, appear in no help text; each says where the default
// comes from instead.
func TestHelpNeverShowsSecrets(t *testing.T) {
	t.Setenv("POSTROOM_DSN", "postgres://app:dsn-s3cret@db.internal:5432/app")
	t.Setenv("POSTROOM_POSTGRES_DSN", "postgres://app:pg-s3cret@db.internal:5432/app")
	t.Setenv("POSTROOM_MYSQL_DSN", "app:my-s3cret@tcp(db.internal:3306)/app")
	t.Setenv("POSTROOM_AMQP_URL", "amqp://app:amqp-s3cret@mq.internal:5672/")
	helps := 0
	for path := range leaves(t) {
		out, err := run(t, append(strings.Fields(path), "--help")...)
		require.NoError(t, err, path)
		require.NotContains(t, out, "s3cret", path)
		require.NotContains(t, out, ".internal", "no part of an environment value: %s", path)
		if strings.Contains(out, "--dsn") {
			require.Contains(t, out, "default: $POSTROOM_DSN", path)
			helps++
		}
		if strings.Contains(out, "--amqp") {
			require.Contains(t, out, "default: $POSTROOM_AMQP_URL", path)
			helps++
		}
	}
	require.Greater(t, helps, 10, "the database and broker commands were looked at")
}

// TestErrorsNeverShowPasswords: a DSN or URL that fails shows no password
// in any of its forms, nor does a typo in its scheme.
func TestErrorsNeverShowPasswords(t *testing.T) {
	for _, args := range [][]string{
		{"inbox", "stats", "--dsn", "postgres://app:s3cret@127.0.0.1:1/x?sslmode=disable&connect_timeout=2"},
		{"inbox", "stats", "--dsn", "postgres://app@127.0.0.1:1/x?sslmode=disable&connect_timeout=2&password=s3cret"},
		{"inbox", "stats", "--dsn", "host=127.0.0.1 port=1 dbname=x user=app password=s3cret connect_timeout=2"},
		{"schedules", "list", "--dsn", "app:s3cret@tcp(127.0.0.1:1)/x?timeout=2s"},
		{"migrate", "--dsn", "mysql://app:s3cret@tcp(127.0.0.1:1)/x?timeout=2s"},
		{"migrate", "--print", "--dsn", "postgress://app:s3cret@db/x"},
		{"errors", "list", "--amqp", "amqp://app:s3cret@127.0.0.1:1/"},
	} {
		out, err := run(t, args...)
		require.Error(t, err, args)
		require.NotContains(t, err.Error()+out, "s3cret", args)
	}
}

// TestMissingOrUnknownCommandsFail: each command with subcommands fails,
// with the reason, on an unknown one or none (cobra would print the help
// and exit 0), and so does help on an unknown topic.
func TestMissingOrUnknownCommandsFail(t *testing.T) {
	for _, parent := range []string{"", "inbox", "schedules", "errors"} {
		args := strings.Fields(parent)
		path := strings.TrimSpace("postroom " + parent)
		_, err := run(t, append(args, "frob")...)
		require.ErrorContains(t, err, `unknown command "frob" for "`+path+`"`)
		_, err = run(t, args...)
		require.ErrorContains(t, err, path+" needs a command")
	}
	_, err := run(t, "inbox", "stat")
	require.ErrorContains(t, err, "did you mean stats?")
	_, err = run(t, "help", "inbox", "frob")
	require.ErrorContains(t, err, `unknown command "frob" for "postroom inbox"`)
	out, err := run(t, "help", "inbox", "stats")
	require.NoError(t, err)
	require.Contains(t, out, "stats reads the inbox table")
}

// TestEachCommandListsOnlyTheFlagsItUses: every command, with exactly the
// flags it reads; a new command must be added here.
func TestEachCommandListsOnlyTheFlagsItUses(t *testing.T) {
	db := []string{"dsn"}
	want := map[string][]string{
		"migrate":           append(db, "inbox-table", "watermarks-table", "schedules-table", "print"),
		"inbox stats":       append(db, "inbox-table", "json"),
		"inbox purge":       append(db, "inbox-table", "watermarks-table", "older-than", "batch", "pause", "force"),
		"inbox unresolved":  append(db, "inbox-table", "json", "limit"),
		"inbox resolve":     append(db, "inbox-table", "source", "done", "release", "attempts"),
		"schedules list":    append(db, "schedules-table", "json"),
		"schedules trigger": append(db, "schedules-table"),
		"schedules pause":   append(db, "schedules-table"),
		"schedules resume":  append(db, "schedules-table"),
		"errors list":       {"amqp", "error-topic", "limit", "json"},
		"errors show":       {"amqp", "error-topic", "limit"},
		"errors replay":     {"amqp", "error-topic", "limit", "all"},
		"errors delete":     {"amqp", "error-topic", "limit", "all"},
		"routes":            {"endpoint", "command", "event", "handler", "json"},
		"delayed list":      append(db, "json", "limit"),
		"console": append(db, "inbox-table", "watermarks-table", "schedules-table", "amqp", "error-topic", "listen", "token", "read-only", "limit",
			"metrics", "sample-interval"),
	}
	got := map[string][]string{}
	for path, c := range leaves(t) {
		got[path] = []string{}
		c.InheritedFlags().VisitAll(func(f *pflag.Flag) { got[path] = append(got[path], f.Name) })
		c.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) { got[path] = append(got[path], f.Name) })
		got[path] = slices.DeleteFunc(got[path], func(n string) bool { return n == "help" })
		slices.Sort(got[path])
	}
	for path := range want {
		slices.Sort(want[path])
	}
	require.Equal(t, want, got)
}

// TestFlagHelpShowsTheValueType: no flag's usage has backticks, which
// pflag would show as the value's name in place of its type ("--attempts
// postroom inbox unresolved" instead of "--attempts int").
func TestFlagHelpShowsTheValueType(t *testing.T) {
	for path, c := range leaves(t) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			require.NotContains(t, f.Usage, "`", "%s --%s", path, f.Name)
		})
	}
	out, err := run(t, "inbox", "resolve", "--help")
	require.NoError(t, err)
	require.Regexp(t, `--attempts int +resolve only this attempt`, out)
	require.Regexp(t, `--source string +the key's source`, out)
}

// TestExamplesAreValidShell: each example line, run through sh, gives
// arguments the command parses, its DSN one of the accepted forms.
func TestExamplesAreValidShell(t *testing.T) {
	sh, err := exec.LookPath("sh")
	require.NoError(t, err)
	examples := 0
	for path, c := range leaves(t) {
		for line := range strings.Lines(c.Example) {
			line = strings.TrimSpace(line)
			if line == "" {
				continue
			}
			rest, ok := strings.CutPrefix(line, "postroom "+path+" ")
			require.True(t, ok, "%s: example %q runs another command", path, line)
			out, err := exec.Command(sh, "-c", `printf '%s\0' `+rest).Output()
			require.NoError(t, err, "%s: example %q is not valid shell", path, line)
			args := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
			root, _ := newRoot(io.Discard, io.Discard)
			cmd, flags, err := root.Find(append(strings.Fields(path), args...))
			require.NoError(t, err, line)
			require.NoError(t, cmd.ParseFlags(flags), line)
			if dsn := cmd.Flag("dsn"); dsn != nil && dsn.Changed {
				require.NotContains(t, dsn.Value.String(), "'", "%s: quotes left in the DSN", line)
				_, err := run(t, "migrate", "--print", "--dsn", dsn.Value.String())
				require.NoError(t, err, "%s: DSN %q", line, dsn.Value.String())
			}
			examples++
		}
	}
	require.GreaterOrEqual(t, examples, 5)
}

// TestPackageDocListsEveryCommand: main.go's doc comment shows each
// command on a line of its parent's ("postroom schedules trigger NAME |
// pause NAME" lists pause).
func TestPackageDocListsEveryCommand(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	require.NoError(t, err)
	doc := f.Doc.Text()
	for path := range leaves(t) {
		parent, name := "", path
		if i := strings.LastIndexByte(path, ' '); i >= 0 {
			parent, name = path[:i]+" ", path[i+1:]
		}
		found := false
		for line := range strings.Lines(doc) {
			rest, ok := strings.CutPrefix(strings.TrimSpace(line), "postroom "+parent)
			found = found || ok && slices.Contains(strings.FieldsFunc(rest, func(r rune) bool { return r == ' ' || r == '|' }), name)
		}
		require.True(t, found, "the package doc lists %q", "postroom "+path)
	}
}
