package consumer

import (
	"context"
	"errors"
	"testing"
	"time"
)

type ctxKey struct{}

func TestHandlerContextCancelledBeforeDone(t *testing.T) {
	parent := context.WithValue(context.Background(), ctxKey{}, "v")
	c := &handlerCtx{parent: parent}
	if c.Err() != nil || c.Value(ctxKey{}) != "v" {
		t.Fatalf("fresh: err %v value %v", c.Err(), c.Value(ctxKey{}))
	}
	if n := testing.AllocsPerRun(100, func() { _ = c.Err() }); n != 0 {
		t.Fatalf("Err allocates %v times before Done is asked for", n)
	}
	c.cancel()
	if !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("cancelled: %v", c.Err())
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("Done asked for after the cancel is not closed")
	}
	if !errors.Is(context.Cause(c), context.Canceled) {
		t.Fatalf("cause %v", context.Cause(c))
	}
}

func TestHandlerContextDerivedAndParent(t *testing.T) {
	parent, cancelParent := context.WithCancel(context.Background())
	c := &handlerCtx{parent: parent}
	child, cancelChild := context.WithTimeout(c, time.Hour)
	defer cancelChild()
	c.cancel()
	select {
	case <-child.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a context derived from the handler's was not cancelled with it")
	}

	c2 := &handlerCtx{parent: parent}
	done := c2.Done()
	stopped := make(chan struct{})
	context.AfterFunc(c2, func() { close(stopped) })
	cancelParent()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the parent's cancel did not reach the handler's context")
	}
	<-stopped
	if !errors.Is(c2.Err(), context.Canceled) {
		t.Fatalf("err %v", c2.Err())
	}

	// Cancelled parent, Done never asked: Err says so, and Done then too.
	c3 := &handlerCtx{parent: parent}
	if !errors.Is(c3.Err(), context.Canceled) {
		t.Fatalf("err under a cancelled parent %v", c3.Err())
	}
	select {
	case <-c3.Done():
	default:
		t.Fatal("Done of a context whose parent is cancelled is open")
	}
}

func TestHandlerContextDeadlineIsParents(t *testing.T) {
	parent, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	want, _ := parent.Deadline()
	c := &handlerCtx{parent: parent}
	if got, ok := c.Deadline(); !ok || !got.Equal(want) {
		t.Fatalf("deadline %v %v, want %v", got, ok, want)
	}
}
