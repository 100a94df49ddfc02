package main

import (
	"bytes"
	"net"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/goleak"
)

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// silentAddr is a loopback address that accepts connections and never
// answers on them, as a hung broker does.
func silentAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

// Each command that talks to brokers names their addresses when none
// answers: refused, or accepted and never answered.
func TestErrorsNameTheBrokers(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // first registered, so run after the listeners close
	for name, addr := range map[string]string{"refused": closedAddr(t), "silent": silentAddr(t)} {
		for _, args := range [][]string{
			{"create", "-brokers", addr, "-timeout", "300ms", "orders"},
			{"produce", "-brokers", addr, "-timeout", "300ms", "-topic", "orders", "v"},
			{"read", "-brokers", addr, "-wait", "300ms", "-topic", "orders", "-n", "1"},
		} {
			err := run(args, strings.NewReader(""), &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), addr) {
				t.Errorf("%s broker: kafkadev %s: %v, want an error naming %s", name, strings.Join(args, " "), err, addr)
			}
			if name == "silent" && err != nil && !strings.Contains(err.Error(), "did not answer within 300ms") {
				t.Errorf("silent broker: kafkadev %s: %v, want it to say the brokers did not answer", args[0], err)
			}
		}
	}
}

// create, produce and read against a broker that answers: the records
// produced are read back, in order.
func TestCreateProduceRead(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // first registered, so run after the listeners close
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr := c.ListenAddrs()[0]
	var out bytes.Buffer
	if err := run([]string{"create", "-brokers", addr, "-partitions", "1", "orders"}, nil, &out); err != nil || out.String() != "created orders\n" {
		t.Fatalf("create: %v, printed %q", err, out.String())
	}
	if err := run([]string{"produce", "-brokers", addr, "-topic", "orders", "-key", "o-1", "a", "b"}, nil, &out); err != nil {
		t.Fatalf("produce: %v", err)
	}
	out.Reset()
	if err := run([]string{"read", "-brokers", addr, "-topic", "orders", "-n", "2"}, nil, &out); err != nil {
		t.Fatalf("read: %v", err)
	}
	want := "partition=0 offset=0 key=\"o-1\" value=\"a\"\npartition=0 offset=1 key=\"o-1\" value=\"b\"\n"
	if out.String() != want {
		t.Fatalf("read printed %q, want %q", out.String(), want)
	}
}
