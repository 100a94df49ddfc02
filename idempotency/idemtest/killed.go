package idemtest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/idempotency"
	"github.com/onceq/onceq/idempotency/httpidem"
)

// Killed is the setup of RunKilled: the test's own binary is run again as
// the HTTP server, so what the server needs is made once by the test and
// named in its environment.
type Killed struct {
	// Setup makes what the servers share (tables) and names it in the
	// environment with t.Setenv, which the servers inherit.
	Setup func(t *testing.T)
	// Store opens the Store named in the environment, in the test and in
	// each server.
	Store func(t *testing.T) dedup.Store
	// Effect is the Store's business write over st, as in Options; the
	// count is read by the test. A Store that commits no business writes
	// leaves it nil: the case then checks the takeover and the replay.
	Effect func(t *testing.T, st dedup.Store) Effect
}

// serverEnv says, in a server process, how the server behaves: "hang"
// (the handler hands its write over, says so and never returns) or
// "serve".
const serverEnv = "ONCEQ_IDEMTEST_SERVER"

// killedExpiry is the servers' InProgressExpiry: the restarted server's
// retry takes the dead one's key over after it (and the skew margin).
const killedExpiry = 3 * time.Second

// RunKilled checks that a server killed with SIGKILL mid-request, then
// restarted, applies a request's effect once, whenever it is killed:
//
//   - BeforeCommit: the handler hands its business write over and is
//     killed before it returns. The client's retry, sent to the restarted
//     server, waits until the dead server's lease has expired, runs the
//     handler and commits its write.
//   - AfterCommit: the server is killed after its commit, before the
//     response went out. The retry gets the stored response replayed,
//     and the handler does not run again.
//
// A further retry gets the response replayed. Call it from a top-level
// test of its own: the test binary runs that test again as the server.
func RunKilled(t *testing.T, k Killed) {
	if mode := os.Getenv(serverEnv); mode != "" {
		serveKilled(t, k, mode)
		return
	}
	if testing.Short() {
		t.Skip("runs servers as processes")
	}
	k.Setup(t)
	eff := k.effect(t, k.Store(t))
	for _, c := range []struct {
		name, mode, signal string
		committed          int // applications when the server is killed
	}{
		{"BeforeCommit", "hang", "entered", 0},
		{"AfterCommit", "die-after-commit", "committed", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := newKey(t)
			body := `{"amount":1250,"currency":"EUR"}`
			first := startServer(t, c.mode)
			done := make(chan error, 1)
			go func() {
				res, err := post(first.url, key, body)
				if err == nil {
					err = fmt.Errorf("the killed server answered %d", res.status)
				}
				done <- err
			}()
			first.await(t, c.signal)
			first.kill(t)
			if err := <-done; err == nil || strings.Contains(err.Error(), "answered") {
				t.Fatalf("the request to the killed server: %v, want its connection cut", err)
			}
			if n := eff.count(t, key); n >= 0 && n != c.committed {
				t.Fatalf("the killed server's write was applied %d times, want %d", n, c.committed)
			}
			second := startServer(t, "serve")
			res, err := post(second.url, key, body)
			replayed := c.committed == 1
			if err != nil || res.status != http.StatusCreated || (res.header.Get(httpidem.HeaderReplayed) == "true") != replayed {
				t.Fatalf("the retry after the restart: %+v, %v; want the 201 (replayed: %v)", res, err, replayed)
			}
			again, err := post(second.url, key, body)
			if err != nil || again.status != http.StatusCreated || again.body != res.body || again.header.Get(httpidem.HeaderReplayed) != "true" {
				t.Fatalf("a further retry: %+v, %v; want the stored 201 replayed", again, err)
			}
			if n := eff.count(t, key); n >= 0 && n != 1 {
				t.Errorf("the payment was applied %d times, want once", n)
			}
		})
	}
}

// effect is the Store's Effect, none without one.
func (k Killed) effect(t *testing.T, st dedup.Store) Effect {
	if k.Effect == nil {
		return Effect{}
	}
	return k.Effect(t, st)
}

// count is Count, or -1 without an Effect.
func (e Effect) count(t *testing.T, id string) int {
	if e.Count == nil {
		return -1
	}
	return e.Count(t, id)
}

// commitSignal tells the test of each commit, and holds the server there
// until it is killed: its response never goes out.
type commitSignal struct{}

func (commitSignal) OnMessageOutcome(_ context.Context, _ *consumer.Message, o consumer.Outcome, _ time.Duration) {
	if o.Kind == consumer.Processed {
		fmt.Println("committed")
		select {} // killed here, after the commit
	}
}

// serveKilled is the server process: the middleware over the Store
// named in the environment, until it is killed.
func serveKilled(t *testing.T, k Killed, mode string) {
	st := k.Store(t)
	eff := k.effect(t, st)
	hang := mode == "hang"
	opts := []idempotency.Option{idempotency.InProgressExpiry(killedExpiry), idempotency.ClockSkewMargin(500 * time.Millisecond),
		idempotency.Wait(time.Minute)}
	if mode == "die-after-commit" {
		opts = append(opts, idempotency.WithHooks(commitSignal{}))
	}
	run, err := idempotency.New(st, opts...)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httpidem.New(run)
	if err != nil {
		t.Fatal(err)
	}
	pay := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.Trim(r.Header.Get(httpidem.HeaderKey), `"`)
		if eff.Write != nil {
			if err := httpidem.Tx(r).Write(eff.Write(key)); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		if hang {
			fmt.Println("entered")
			select {} // killed here, its write handed over and not committed
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"payment":%q,"server":%d}`, key, os.Getpid())
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("listening", ln.Addr().String())
	_ = http.Serve(ln, mw.Wrap(pay)) // until killed
}

// server is a server process the test started.
type server struct {
	cmd   *exec.Cmd
	url   string
	lines chan string
	log   string
}

func startServer(t *testing.T, mode string) *server {
	t.Helper()
	top, _, _ := strings.Cut(t.Name(), "/") // the server runs the top-level test alone
	s := &server{lines: make(chan string, 16), log: filepath.Join(t.TempDir(), mode+".log")}
	s.cmd = exec.Command(os.Args[0], "-test.run", "^"+regexp.QuoteMeta(top)+"$", "-test.count=1", "-test.timeout=10m")
	s.cmd.Env = append(os.Environ(), serverEnv+"="+mode)
	logf, err := os.Create(s.log)
	if err != nil {
		t.Fatal(err)
	}
	s.cmd.Stderr = logf
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		defer close(s.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	go func() { _ = s.cmd.Wait(); _ = logf.Close(); close(exited) }()
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		<-exited
		if t.Failed() {
			b, _ := os.ReadFile(s.log)
			t.Logf("%s server's log:\n%s", mode, b)
		}
	})
	addr := s.await(t, "listening ")
	s.url = "http://" + strings.TrimPrefix(addr, "listening ") + "/payments"
	return s
}

// await returns the server's first line that starts with prefix.
func (s *server) await(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case l, ok := <-s.lines:
			if !ok {
				t.Fatalf("the server exited before it printed %q", prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-timeout:
			t.Fatalf("the server printed no %q in 2 minutes", prefix)
		}
	}
}

func (s *server) kill(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
}

// post sends one payment request with a client of its own.
func post(url, key, body string) (response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return response{}, err
	}
	req.Header.Set(httpidem.HeaderKey, `"`+key+`"`)
	c := &http.Client{Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	res, err := c.Do(req)
	if err != nil {
		return response{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return response{status: res.StatusCode, header: res.Header, body: string(b)}, err
}
