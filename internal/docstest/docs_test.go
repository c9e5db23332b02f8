package docstest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/format"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/postroom/postroom/bus"
	"github.com/postroom/postroom/handlers"
	"github.com/postroom/postroom/internal/testenv"
	"github.com/postroom/postroom/transport/amqp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// moduleRoot is the repository's root, two levels above this package.
func moduleRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(root, "go.mod"))
	require.NoError(t, err, "docstest: the module root should be two levels up")
	return root
}

func docBlocks(t testing.TB) (string, []block) {
	t.Helper()
	root := moduleRoot(t)
	blocks, err := allBlocks(root)
	require.NoError(t, err)
	return root, blocks
}

// isCompleteFile reports whether Go source starts, after comments, with a
// package clause.
func isCompleteFile(src string) bool {
	_, err := parser.ParseFile(token.NewFileSet(), "", src, parser.PackageClauseOnly)
	return err == nil
}

// TestGoBlocks builds every Go block of README.md and docs/*.md (see the
// package documentation for the rules) in one go build, then runs the
// programs marked run: on the embedded default (SQLite and the in-memory
// transport), and getting-started's also on PostgreSQL and RabbitMQ.
func TestGoBlocks(t *testing.T) {
	t.Parallel()
	root, blocks := docBlocks(t)
	var complete []block
	pkgs := map[string]bool{}
	for _, b := range blocks {
		if !b.isGo() {
			continue
		}
		switch b.mark.kind {
		case "from", "file":
			if filepath.Ext(b.mark.arg) != ".go" {
				t.Errorf("%s: a Go block copied from %s, which is not a Go file", b, b.mark.arg)
				continue
			}
			pkgs["./"+filepath.ToSlash(filepath.Dir(b.mark.arg))] = true
		case "", "run":
			if !isCompleteFile(b.text) {
				t.Errorf("%s: a Go block must be a complete file (its package clause first), or an excerpt of a file that builds, "+
					"marked on the line before the fence with <!-- docstest: from path/to/file.go -->", b)
				continue
			}
			if formatted, err := format.Source([]byte(b.text)); err == nil && string(formatted) != b.text {
				t.Errorf("%s: the Go block is not gofmt-formatted; gofmt says:\n%s", b, formatted)
			}
			complete = append(complete, b)
		default:
			t.Errorf("%s: a Go block cannot be marked %q", b, b.mark.kind)
		}
	}
	runs := runnable(t, blocks)
	require.NotEmpty(t, complete, "no Go block found: is the module root right?")
	require.NotEmpty(t, runs, "no block is marked to run")

	dirs := writeBlocks(t, root, complete)
	bins := map[string]string{} // a block's String() -> its executable
	binDir := t.TempDir()
	for i, b := range complete {
		bins[b.String()] = filepath.Join(binDir, path.Base(dirs[i]))
	}
	for p := range pkgs {
		dirs = append(dirs, p)
	}
	slices.Sort(dirs)
	if out, err := goCmd(root, append([]string{"build", "-o", binDir + string(filepath.Separator)}, dirs...)...); err != nil {
		t.Fatalf("the docs' Go code does not build (%v):\n%s", err, out)
	}
	t.Logf("built %d Go blocks and the packages quoted in %d more (%v)", len(complete), len(pkgs), slices.Sorted(maps.Keys(pkgs)))

	for _, r := range runs {
		t.Run("run "+r.program.String(), func(t *testing.T) {
			t.Parallel()
			out := runProgram(t, bins[r.program.String()], t.TempDir(), nil, r.want)
			t.Logf("%s printed:\n%s", r.program, out)
		})
	}
	t.Run("run docs/getting-started.md's program on PostgreSQL and RabbitMQ", func(t *testing.T) {
		t.Parallel()
		var gs *aRun
		for i, r := range runs {
			if r.program.doc == "docs/getting-started.md" {
				gs = &runs[i]
			}
		}
		require.NotNil(t, gs, "docs/getting-started.md has no program marked run")
		runOnPostgresAndRabbitMQ(t, bins[gs.program.String()], gs.want)
	})
}

// TestBrokenBlockFails checks the check: a block that does not compile
// fails the build, with the Markdown file and line in the error.
func TestBrokenBlockFails(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	doc := "package main\n\nimport \"github.com/postroom/postroom/bus\"\n\nfunc main() { bus.NoSuchFunction() }\n"
	blocks, err := parseMarkdown("docs/broken.md", []byte("# Broken\n\n```go\n"+doc+"```\n"))
	require.NoError(t, err)
	require.Len(t, blocks, 1)
	require.True(t, isCompleteFile(blocks[0].text))
	dirs := writeBlocks(t, root, blocks)
	out, err := goCmd(root, append([]string{"build", "-o", os.DevNull}, dirs...)...)
	require.Error(t, err, "a block calling a function that does not exist built")
	require.Contains(t, out, "docs/broken.md:8", "the error should point at the Markdown line")
	require.Contains(t, out, "NoSuchFunction")

	require.False(t, isCompleteFile("b, _ := bus.New(bus.Config{})\n"), "a fragment is not a complete file")
}

// TestCopiedBlocksMatch: a block marked as a copy of a file (file) or an
// excerpt of one (from) still matches it, in any language.
func TestCopiedBlocksMatch(t *testing.T) {
	t.Parallel()
	root, blocks := docBlocks(t)
	n := 0
	for _, b := range blocks {
		if b.mark.kind != "file" && b.mark.kind != "from" {
			continue
		}
		n++
		content, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(b.mark.arg)))
		if err != nil {
			t.Errorf("%s: copied from %s: %v", b, b.mark.arg, err)
			continue
		}
		switch b.mark.kind {
		case "file":
			if b.text != string(content) {
				t.Errorf("%s: the block is no longer %s: copy the file into the block again", b, b.mark.arg)
			}
		case "from":
			if !isExcerpt(b.text, string(content)) {
				t.Errorf("%s: the block is no longer an excerpt of %s (whole lines, in order): copy them again", b, b.mark.arg)
			}
		}
	}
	t.Logf("%d blocks copied from files", n)
}

func TestExcerpt(t *testing.T) {
	t.Parallel()
	file := "package x\n\nfunc f() {\n\tif a {\n\t\tb()\n\n\t\tc()\n\t}\n}\n"
	require.True(t, isExcerpt("if a {\n\tb()\n\n\tc()\n}\n", file))
	require.True(t, isExcerpt("b()\n", file))
	require.False(t, isExcerpt("if a {\n\tc()\n}\n", file), "a line left out")
	require.False(t, isExcerpt("if a {\n  b()\n", file), "indentation changed inside")
}

func TestParseMarkdown(t *testing.T) {
	t.Parallel()
	md := "text\n<!-- docstest: run -->\n```go\npackage main\n```\n\n<!-- docstest: output -->\n```\nhello\n```\n" +
		"  ~~~sh\n  echo ~~~\n  ~~~\n"
	blocks, err := parseMarkdown("x.md", []byte(md))
	require.NoError(t, err)
	require.Len(t, blocks, 3)
	require.Equal(t, block{doc: "x.md", line: 3, lang: "go", text: "package main\n", mark: marker{"run", ""}}, blocks[0])
	require.Equal(t, marker{"output", ""}, blocks[1].mark)
	require.Equal(t, "hello\n", blocks[1].text)
	require.Equal(t, "echo ~~~\n", blocks[2].text)

	for _, bad := range []string{
		"<!-- docstest: frm x.go -->\n```go\n```\n",  // unknown kind
		"<!-- docstest: from -->\n```go\n```\n",      // no path
		"<!-- docstest: run -->\n\n```go\n```\n",     // not right before the fence
		"<!--docstest from x.go-->\n```go\n```\n",    // malformed
		"```go\npackage main\n",                      // never closed
		"<!-- docstest: run x.go -->\n```go\n```\n",  // run takes no path
		"text\n<!-- docstest: file a.js -->\ntext\n", // no fence at all
	} {
		_, err := parseMarkdown("x.md", []byte(bad))
		require.Error(t, err, bad)
	}
}

// aRun is a program to run and the lines it must print.
type aRun struct {
	program block
	want    []string
}

// runnable pairs each block marked run with the output block after it.
func runnable(t *testing.T, blocks []block) []aRun {
	t.Helper()
	var runs []aRun
	for i, b := range blocks {
		switch b.mark.kind {
		case "run":
			if !b.isGo() || !isCompleteFile(b.text) {
				t.Errorf("%s: only a complete Go program can be marked run", b)
				continue
			}
			if i+1 == len(blocks) || blocks[i+1].doc != b.doc || blocks[i+1].mark.kind != "output" {
				t.Errorf("%s: a block marked run must be followed by a block marked output (what it prints)", b)
				continue
			}
			runs = append(runs, aRun{b, lines(blocks[i+1].text)})
		case "output":
			if i == 0 || blocks[i-1].mark.kind != "run" {
				t.Errorf("%s: a block marked output must follow a block marked run", b)
			}
		}
	}
	return runs
}

func lines(s string) []string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// runProgram runs bin in dir with the environment less POSTROOM_*, plus
// env; once it has printed every line of want it is interrupted. It must
// exit with status 0, having printed want's lines and no others, in any
// order. It returns what the program printed.
func runProgram(t *testing.T, bin, dir string, env []string, want []string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "POSTROOM_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())

	var mu sync.Mutex
	var got []string
	all := make(chan struct{}) // closed once got holds every line of want
	eof := make(chan struct{})
	go func() {
		defer close(eof)
		sc := bufio.NewScanner(stdout)
		signalled := false
		for sc.Scan() {
			mu.Lock()
			got = append(got, sc.Text())
			if !signalled && containsAll(got, want) {
				signalled = true
				close(all)
			}
			mu.Unlock()
		}
	}()
	select {
	case <-all:
		require.NoError(t, cmd.Process.Signal(os.Interrupt))
	case <-eof: // exited by itself, or closed its output
	case <-time.After(90 * time.Second):
		_ = cmd.Process.Kill()
	}
	<-eof
	err = cmd.Wait()
	mu.Lock()
	defer mu.Unlock()
	out := strings.Join(got, "\n")
	require.NoError(t, err, "the program failed; it printed:\n%s\nand on stderr:\n%s", out, stderr.String())
	require.ElementsMatch(t, want, got, "the program printed other lines than its output block (stderr:\n%s)", stderr.String())
	return out
}

// containsAll reports whether got holds every line of want, as many times.
func containsAll(got, want []string) bool {
	left := map[string]int{}
	for _, l := range got {
		left[l]++
	}
	for _, l := range want {
		if left[l] == 0 {
			return false
		}
		left[l]--
	}
	return true
}

// writeBlocks writes each block as the one file of a package in a new
// directory under testdata/ (inside the module, so that it builds with the
// module's go.mod), removed when the test ends, and returns the packages'
// paths relative to root. A line directive makes compiler errors name the
// Markdown file and line.
func writeBlocks(t testing.TB, root string, blocks []block) []string {
	t.Helper()
	dir, err := os.MkdirTemp(filepath.Join(root, "internal", "docstest", "testdata"), "blocks-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	var pkgs []string
	for i, b := range blocks {
		sub := filepath.Join(dir, fmt.Sprintf("b%02d", i))
		require.NoError(t, os.Mkdir(sub, 0o755))
		src := fmt.Sprintf("//line %s:%d\n%s", filepath.Join(root, filepath.FromSlash(b.doc)), b.line+1, b.text)
		require.NoError(t, os.WriteFile(filepath.Join(sub, "block.go"), []byte(src), 0o644))
		rel, err := filepath.Rel(root, sub)
		require.NoError(t, err)
		pkgs = append(pkgs, "./"+filepath.ToSlash(rel))
	}
	return pkgs
}

// goCmd runs the go command in root, offline (the module cache has what
// go.mod requires), and returns its combined output.
func goCmd(root string, args ...string) (string, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOPROXY=off")
	out, err := cmd.CombinedOutput()
	if errors.Is(err, exec.ErrNotFound) {
		return "", fmt.Errorf("docstest: the go command is not on PATH: %w", err)
	}
	return string(out), err
}

// runOnPostgresAndRabbitMQ runs getting-started's program as its section 4
// says, with POSTROOM_DSN (a fresh PostgreSQL schema) and
// POSTROOM_AMQP_URL set. The broker is shared: the queues of the
// endpoint "billing" and its command exchanges are deleted before and
// after, so that nothing an earlier run left behind is handled in this one.
func runOnPostgresAndRabbitMQ(t *testing.T, bin string, want []string) {
	t.Helper()
	dsn := testenv.PostgresSchemaDSN(t)
	url := testenv.RequireAMQP(t)
	deleteQueues := func() {
		conn, err := amqp091.Dial(url)
		require.NoError(t, err)
		defer conn.Close()
		names := []string{"billing.CreateInvoice", "billing.InvoiceCreated", "billing.SendReminders", bus.MessageName[handlers.CleanupStore]()}
		for _, name := range names {
			group := bus.GroupOf("billing", name)
			for _, topic := range []string{bus.CommandTopic("billing", name), bus.EventTopic(name)} {
				ch, err := conn.Channel()
				require.NoError(t, err)
				_, _ = ch.QueueDelete(amqp.QueueName(topic, group), false, false, false) // none yet: fine
				_ = ch.Close()
			}
			// A command topic's exchange is the endpoint's own (an
			// event's is shared): scripts/test.sh's check of the broker
			// found these four left.
			ch, err := conn.Channel()
			require.NoError(t, err)
			_ = ch.ExchangeDelete(bus.CommandTopic("billing", name), false, false) // none yet: fine
			_ = ch.Close()
		}
	}
	deleteQueues()
	t.Cleanup(deleteQueues)
	out := runProgram(t, bin, t.TempDir(), []string{"POSTROOM_DSN=" + dsn, "POSTROOM_AMQP_URL=" + url}, want)
	t.Logf("on PostgreSQL and RabbitMQ it printed:\n%s", out)
}
