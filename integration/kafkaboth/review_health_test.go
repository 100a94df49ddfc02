package kafkaboth_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// A broker that answers every fetch, promptly, with a partition error (a
// failed disk: KAFKA_STORAGE_ERROR; or UNKNOWN_SERVER_ERROR) turns either
// source's consumer not ready within the bound, naming the broker, and
// ready again once the fetches succeed: once records flow, and on an idle
// topic too.
func TestReviewFetchErrorsTurnReadiness(t *testing.T) {
	t.Parallel()
	for name, open := range healthOpeners {
		for _, code := range []*kerr.Error{kerr.KafkaStorageError, kerr.UnknownServerError} {
			idle := code == kerr.KafkaStorageError
			t.Run(name+"/"+code.Message, func(t *testing.T) {
				t.Parallel()
				k := newPausable(t)
				topic, group := topicName(t, "in"), topicName(t, "group")
				createTopic(t, k.addr, topic, 1)
				cl := client(t, k.addr, kgo.DefaultProduceTopic(topic))
				produce(t, cl, &kgo.Record{Value: []byte("m1")})
				src := open(t, k.addr, group, topic)
				w := startWorker(t, src)
				w.await(t, "m1")
				w.until(t, true, 10*time.Second)

				var failing atomic.Bool
				failing.Store(true)
				k.ControlKey(kmsg.Fetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
					k.KeepControl()
					if !failing.Load() {
						return nil, nil, false
					}
					fr := req.(*kmsg.FetchRequest)
					resp := fr.ResponseKind().(*kmsg.FetchResponse)
					for _, rt := range fr.Topics {
						st := kmsg.NewFetchResponseTopic()
						st.Topic, st.TopicID = rt.Topic, rt.TopicID
						for _, rp := range rt.Partitions {
							sp := kmsg.NewFetchResponseTopicPartition()
							sp.Partition, sp.ErrorCode = rp.Partition, code.Code
							st.Partitions = append(st.Partitions, sp)
						}
						resp.Topics = append(resp.Topics, st)
					}
					return resp, nil, true
				})
				took, body := w.until(t, false, notReadyWithin)
				if !strings.Contains(body, k.addr) {
					t.Fatalf("readyz body %s: want the broker's address %s", body, k.addr)
				}
				t.Logf("fetches failing: not ready after %v: %s", took.Round(100*time.Millisecond), strings.TrimSpace(body))

				failing.Store(false)
				if idle {
					// A poll returns only with records or errors: the
					// failure must not stay open while the topic is idle.
					w.until(t, true, 30*time.Second)
				}
				produce(t, cl, &kgo.Record{Value: []byte("m2")})
				w.await(t, "m2")
				w.until(t, true, 30*time.Second)
				rec := httptest.NewRecorder()
				w.c.HealthHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
				if rec.Code != http.StatusOK {
					t.Fatalf("readyz %d once records flow again, want 200", rec.Code)
				}
			})
		}
	}
}

// A group join the broker holds, at the first Receive, is said within
// 30s by a line that names the broker's address.
func TestReviewHeldGroupJoinNamesTheBroker(t *testing.T) {
	t.Parallel()
	for name, open := range healthOpeners {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			k := newPausable(t)
			topic, group := topicName(t, "in"), topicName(t, "group")
			createTopic(t, k.addr, topic, 1)
			release := make(chan struct{})
			k.ControlKey(kmsg.JoinGroup.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
				k.KeepControl()
				k.SleepControl(func() { <-release })
				return nil, nil, false
			})
			src := open(t, k.addr, group, topic)
			w := startWorker(t, src)
			testenv.Eventually(t, 30*time.Second, "a line saying what the worker waits for", func() bool {
				return strings.Contains(w.logs.String(), "waiting for the source")
			})
			if line := lineWith(w.logs.String(), "waiting for the source"); !strings.Contains(line, k.addr) {
				t.Fatalf("line %q: want the broker's address %s", line, k.addr)
			}
			took := w.stop(t)
			close(release)
			if took > stopWithin {
				t.Fatalf("stop took %v with the group join held, want at most %v", took, stopWithin)
			}
		})
	}
}
