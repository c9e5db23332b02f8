package browsertest

import (
	"bufio"
	"bytes"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/postroom/postroom/internal/testenv"
)

// buildPostroom builds the postroom command of this repository, in its
// own module.
func buildPostroom(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "postroom")
	build := exec.Command("go", "build", "-o", bin, "./cmd/postroom")
	build.Dir = ".." // the library's module, with its go.sum
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// syncBuffer is a bytes.Buffer that a process and the test share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestConsoleCommand runs `postroom console` as an operator does: it
// refuses an address other than loopback without a token; with the token
// in $POSTROOM_CONSOLE_TOKEN, the browser is sent to the login form, and
// in once it gives the token. Neither the DSN's password, the broker
// URL's nor the token is on a page, on the command's output or in its log.
func TestConsoleCommand(t *testing.T) {
	ctx := browser(t)
	bin := buildPostroom(t)
	u, err := url.Parse(testenv.PostgresSchemaDSN(t))
	require.NoError(t, err)
	const password, amqpPassword, token = "pg-pa55word", "amqp-pa55word", "console-t0ken"
	u.User = url.UserPassword(u.User.Username(), password) // local PostgreSQL trusts 127.0.0.1: any password passes
	dsn := u.String()
	out, err := exec.Command(bin, "migrate", "--dsn", dsn).CombinedOutput()
	require.NoError(t, err, "%s", out)

	out, err = exec.Command(bin, "console", "--dsn", dsn, "--listen", "0.0.0.0:0").CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "is not a loopback address: set an access token with --token or $POSTROOM_CONSOLE_TOKEN")

	// A broker URL whose password RabbitMQ refuses: the failed-messages
	// page shows the error, without the password.
	amqpURL, err := url.Parse(testenv.RequireAMQP(t))
	require.NoError(t, err)
	amqpURL.User = url.UserPassword(amqpURL.User.Username(), amqpPassword)
	cmd := exec.Command(bin, "console", "--dsn", dsn, "--listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "POSTROOM_AMQP_URL="+amqpURL.String())
	cmd.Env = append(cmd.Env, "POSTROOM_CONSOLE_TOKEN="+token)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var logs syncBuffer
	cmd.Stderr = &logs
	require.NoError(t, cmd.Start())
	exited, firstLine := make(chan error, 1), make(chan string, 1)
	go func() {
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			select {
			case firstLine <- lines.Text():
			default:
			}
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	var first string
	select {
	case first = <-firstLine:
	case <-time.After(20 * time.Second):
		t.Fatalf("the command printed no address within 20s; its log:\n%s", logs.String())
	}
	base, ok := strings.CutPrefix(first, "postroom console on ")
	require.True(t, ok, first)
	base = strings.TrimSuffix(base, "/")

	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/schedules"), chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`))))
	screenshot(t, ctx, "login")
	require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), "wrong"),
		chromedp.Submit(chromedp.CSS(`input[name="token"]`)), chromedp.WaitVisible(chromedp.CSS("p.error"))))
	require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), token),
		chromedp.Submit(chromedp.CSS(`input[name="token"]`)), chromedp.WaitVisible(chromedp.CSS("#no-schedules"))))
	var pages strings.Builder
	for _, path := range []string{"/", "/failed", "/unresolved", "/schedules", "/inbox?id=x"} {
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+path), chromedp.WaitVisible(chromedp.CSS("footer"))))
		html, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.documentElement.outerHTML`))
		require.NoError(t, err)
		require.NotContains(t, html, `input[name="token"]`, "%s: logged in", path)
		pages.WriteString(html)
	}

	require.Contains(t, pages.String(), `class="error"`, "the broker's refusal is shown")

	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	select {
	case err := <-exited:
		exited <- err
		require.NoError(t, err, "the command stops cleanly on an interrupt")
	case <-time.After(10 * time.Second):
		t.Fatal("the command did not stop within 10s of an interrupt")
	}
	require.Contains(t, logs.String(), "console: login with a wrong token")
	for _, secret := range []string{password, amqpPassword, token} {
		require.NotContains(t, pages.String(), secret)
		require.NotContains(t, first, secret)
		require.NotContains(t, logs.String(), secret)
	}
}
