package main

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/chromedp/chromedp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/cmd/onceq/internal/redrive"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/kafkagroup"
	"github.com/onceq/onceq/sources/sqssource"
)

// The dead-letter flags of onceq console need -actions, one source, and
// the flags of that source only.
func TestConsoleLettersUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"console", "-table", "t", "-sqs-dlq", "u"}, "they need -actions"},
		{[]string{"console", "-table", "t", "-actions", "-sqs-dlq", "u", "-kafka-dlt", "d", "-kafka-brokers", "b"}, "give one of -sqs-dlq and -kafka-dlt"},
		{[]string{"console", "-table", "t", "-actions", "-sqs-source", "u"}, "-sqs-source goes with -sqs-dlq"},
		{[]string{"console", "-table", "t", "-actions", "-kafka-dlt", "d"}, "-kafka-dlt needs -kafka-brokers"},
		{[]string{"console", "-table", "t", "-actions", "-kafka-brokers", "b"}, "go with -kafka-dlt"},
	} {
		code, _, errOut := onceq(c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("onceq %s: exit %d, %q; want 2 and %q", strings.Join(c.args, " "), code, errOut, c.want)
		}
	}
}

// A message's dead letter redriven from its page in headless Chromium,
// over PostgreSQL and the SQS emulator: the failed message's letter goes
// back to its source queue and its record is reset (a claim acquires it
// again); the completed message's letter is not sent back, its record is
// kept, and both the confirmation and the result say so; the letter of a
// third message, looked at on the way, stays in the dead-letter queue.
// Screenshots of each step are saved in the test's artifact directory.
func TestConsoleRedrivesDeadLettersInBrowser(t *testing.T) {
	chromiumPath(t)
	q := localSQS(t)
	s := redriveStores(t)["postgres"](t)
	qn := "onceq-console-" + tableName(t)[len("onceq_cli_"):]
	src, _ := createQueue(t, q, qn, nil)
	dlq, _ := createQueue(t, q, qn+"-dlq", nil)
	t.Cleanup(func() {
		for _, u := range []string{src, dlq} {
			_, _ = q.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(u)})
		}
	})
	completed, failed, absent, _ := redriveRecords(t, s.st, "order-"+qn)
	for _, k := range []string{completed, failed, absent} {
		_, err := q.SendMessage(t.Context(), &awssqs.SendMessageInput{QueueUrl: aws.String(dlq), MessageBody: aws.String("body of " + k),
			MessageAttributes: map[string]sqstypes.MessageAttributeValue{
				broker.IdempotencyKeyAttribute: {DataType: aws.String("String"), StringValue: aws.String(k)},
				sqssource.ReasonAttribute:      {DataType: aws.String("String"), StringValue: aws.String("handler: poison")},
			}})
		if err != nil {
			t.Fatal(err)
		}
	}
	failedKey, completedKey := mustKey(t, "onceq", failed), mustKey(t, "onceq", completed)

	base := startConsole(t, append(s.args, "-actions", "-sqs-dlq", dlq, "-sqs-source", src)...)
	p := pageCheck{t: t, ctx: browser(t), base: base, dir: t.ArtifactDir()}

	// The failed message: its letter goes back, its record reset.
	wantIn(t, "failed message", p.load("/message?key="+urlQuery(failed), "letter-message"), "DEAD_LETTER", "poison")
	p.do("redrive its letter", "#confirm", chromedp.Click(chromedp.CSS("#redrive-letter")))
	p.shoot("letter-confirm")
	wantIn(t, "confirmation", p.text("main"), failedKey, "DEAD_LETTER", "SQS queue "+qn+"-dlq", "Redrive its dead letter")
	if n := p.count("#completed"); n != 0 {
		t.Errorf("the failed record's confirmation warns of a COMPLETED record")
	}
	if n := queueDepth(t, q, src); n != 0 {
		t.Fatalf("the source queue holds %d before the confirmation", n)
	}
	p.do("confirm the redrive", "#done", chromedp.Click(chromedp.CSS("#confirm")))
	p.shoot("letter-done")
	wantIn(t, "redriven", p.text("#done"), "1 dead letter(s) sent back to the source, the record reset first", dedup.KeyHash(failedKey))
	got := drain(t, q, src, 1)
	if len(got) != 1 || aws.ToString(got[0].MessageAttributes[broker.IdempotencyKeyAttribute].StringValue) != failed || aws.ToString(got[0].Body) != "body of "+failed {
		t.Fatalf("the source queue got %d messages, want the failed message's letter once", len(got))
	}
	if r, err := s.st.Get(t.Context(), failedKey); err != nil || r.Status != dedup.StatusFailed || r.Attempts != 0 || !strings.Contains(r.LastError, "redriven from SQS queue") {
		t.Fatalf("the failed record after the redrive: %+v, %v; want it reset", r, err)
	}

	// The completed message: not re-run, and the pages say so.
	wantIn(t, "completed message", p.load("/message?key="+urlQuery(completed), "letter-completed-message"), "COMPLETED")
	p.do("redrive its letter", "#confirm", chromedp.Click(chromedp.CSS("#redrive-letter")))
	p.shoot("letter-completed-confirm")
	wantIn(t, "completed confirmation", p.text("#completed"), "Its record is COMPLETED", "will not be sent back")
	p.do("confirm the redrive", "#done", chromedp.Click(chromedp.CSS("#confirm")))
	p.shoot("letter-completed-done")
	wantIn(t, "not redriven", p.text("#done"), "1 dead letter(s) NOT sent back: the record is COMPLETED", "stays in SQS queue "+qn+"-dlq")
	if r, err := s.st.Get(t.Context(), completedKey); err != nil || r.Status != dedup.StatusCompleted {
		t.Fatalf("the completed record after the redrive: %+v, %v; want it kept", r, err)
	}
	// Every letter not moved is given back: the completed message's and
	// the third message's, passed over on the way.
	if n := queueDepth(t, q, src); n != 0 {
		t.Fatalf("the source queue holds %d after the completed message's redrive, want none", n)
	}
	if n := queueDepth(t, q, dlq); n != 2 {
		t.Fatalf("the dead-letter queue holds %d, want the completed and the third message's letters", n)
	}

	// Now claimable again: the reset record runs the message once more.
	c, err := s.st.Claim(t.Context(), dedup.ClaimRequest{Key: failedKey, Owner: "w2", Now: time.Now(), LeaseUntil: time.Now().Add(time.Minute)})
	if err != nil || !c.Acquired {
		t.Fatalf("claim of the redriven message: %+v, %v; want it acquired", c, err)
	}
	t.Logf("screenshots in %s", p.dir)
}

// The same on Kafka, over PostgreSQL: the console reads the dead-letter
// topic with no consumer group, sends the failed message's letter back to
// its original topic (its record reset), not the completed one's, and
// commits nothing: onceq redrive's group then finds all three letters.
func TestConsoleRedrivesKafkaDeadLettersInBrowser(t *testing.T) {
	chromiumPath(t)
	brokers := testenv.KafkaBrokers(t)
	s := redriveStores(t)["postgres"](t)
	name := tableName(t)
	orig, dlt := name+"-orders", name+"-orders-dlt"
	cl := redriveKafka(t, brokers)
	completed, failed, absent, _ := redriveRecords(t, s.st, "order-"+name)
	recs := []*kgo.Record{{Topic: orig, Key: []byte("first")}}
	for _, k := range []string{completed, failed, absent} {
		recs = append(recs, &kgo.Record{Topic: dlt, Key: []byte(k), Value: []byte("body of " + k), Headers: []kgo.RecordHeader{
			{Key: broker.IdempotencyKeyAttribute, Value: []byte(k)}, {Key: kafkagroup.ReasonHeader, Value: []byte("handler: poison")},
			{Key: kafkagroup.OriginalTopicHeader, Value: []byte(orig)}, {Key: kafkagroup.OriginalPartitionHeader, Value: []byte("0")},
			{Key: kafkagroup.OriginalOffsetHeader, Value: []byte("7")}}})
	}
	if err := cl.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	failedKey, completedKey := mustKey(t, "onceq", failed), mustKey(t, "onceq", completed)

	base := startConsole(t, append(s.args, "-actions", "-kafka-dlt", dlt, "-kafka-brokers", brokers)...)
	p := pageCheck{t: t, ctx: browser(t), base: base, dir: t.ArtifactDir()}

	p.load("/message?key="+urlQuery(failed), "kafka-letter-message")
	p.do("redrive its letter", "#confirm", chromedp.Click(chromedp.CSS("#redrive-letter")))
	wantIn(t, "confirmation", p.text("main"), failedKey, "DEAD_LETTER", "Kafka topic "+dlt)
	p.do("confirm the redrive", "#done", chromedp.Click(chromedp.CSS("#confirm")))
	p.shoot("kafka-letter-done")
	wantIn(t, "redriven", p.text("#done"), "1 dead letter(s) sent back to the source, the record reset first")
	if r, err := s.st.Get(t.Context(), failedKey); err != nil || r.Status != dedup.StatusFailed || r.Attempts != 0 {
		t.Fatalf("the failed record after the redrive: %+v, %v; want it reset", r, err)
	}

	p.load("/message?key="+urlQuery(completed), "kafka-letter-completed-message")
	p.do("redrive its letter", "#confirm", chromedp.Click(chromedp.CSS("#redrive-letter")))
	p.do("confirm the redrive", "#done", chromedp.Click(chromedp.CSS("#confirm")))
	p.shoot("kafka-letter-completed-done")
	wantIn(t, "not redriven", p.text("#done"), "1 dead letter(s) NOT sent back: the record is COMPLETED")
	if r, err := s.st.Get(t.Context(), completedKey); err != nil || r.Status != dedup.StatusCompleted {
		t.Fatalf("the completed record after the redrive: %+v, %v; want it kept", r, err)
	}

	// The original topic holds its first record and the failed letter.
	rd, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.ConsumeTopics(orig), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var moved []string
	testenv.Eventually(t, 30*time.Second, "the failed letter in the original topic", func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		for _, r := range rd.PollFetches(ctx).Records() {
			if string(r.Key) != "first" {
				moved = append(moved, string(r.Value))
			}
		}
		return len(moved) > 0
	})
	if len(moved) != 1 || moved[0] != "body of "+failed {
		t.Fatalf("the original topic got %q, want the failed message's letter alone", moved)
	}
	// The console committed no offset: onceq redrive's group looks at all
	// three letters, and moves only the one with no record.
	code, out, errOut := onceq(append(append([]string{"redrive"}, s.args...), "-kafka-dlt", dlt, "-kafka-brokers", brokers)...)
	if code != 0 || !strings.Contains(out, "3 looked at: moved 2, 1 completed (not re-run)") {
		t.Fatalf("onceq redrive after the console: exit %d, %s\n%s", code, out, errOut)
	}
}

// A dead letter's redrive is refused from another site, without this
// console's token, and by a console given no dead-letter queue or topic;
// the run is made only for the console's own confirmed form, for the
// form's key_hash.
func TestConsoleLetterRedriveGuarded(t *testing.T) {
	srv, _, key, con := memConsole(t, true)
	var runs []string
	con.letters = &letterRedrive{from: "SQS queue orders-dlq", run: func(_ context.Context, keyHash string) (redrive.Report, error) {
		runs = append(runs, keyHash)
		return redrive.Report{Seen: 1, Moved: 1}, nil
	}}
	send := func(form url.Values, headers map[string]string) (int, string) {
		t.Helper()
		return postTo(t, srv, "/redrive-letter", form, headers)
	}
	form := url.Values{"stored_key": {key}, "token": {con.token}}
	for _, c := range []struct {
		what    string
		form    url.Values
		headers map[string]string
	}{
		{"a cross-site form", form, map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{"another origin", form, map[string]string{"Origin": "http://console.example"}},
		{"no token", url.Values{"stored_key": {key}}, nil},
		{"another token", url.Values{"stored_key": {key}, "token": {strings.Repeat("0", 64)}}, nil},
	} {
		if status, body := send(c.form, c.headers); status != http.StatusForbidden {
			t.Errorf("%s: status %d, want 403: %s", c.what, status, body)
		}
	}
	if len(runs) != 0 {
		t.Fatalf("refused forms ran %d redrives", len(runs))
	}
	status, body := send(form, map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": srv.URL})
	if status != http.StatusOK || !strings.Contains(body, "1 dead letter(s) sent back") || len(runs) != 1 || runs[0] != dedup.KeyHash(key) {
		t.Fatalf("the console's own form: status %d, runs %q: %s", status, runs, body)
	}

	// Without -sqs-dlq or -kafka-dlt, no page offers it and the form is refused.
	srv, _, key, con = memConsole(t, true)
	if status, body := send(url.Values{"stored_key": {key}, "token": {con.token}}, nil); status != http.StatusForbidden || !strings.Contains(body, "does not redrive dead letters") {
		t.Errorf("a console with no dead-letter queue: status %d: %s", status, body)
	}
	res, err := srv.Client().Get(srv.URL + "/message?stored_key=" + url.QueryEscape(key))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if strings.Contains(string(b), `id="redrive-letter"`) || !strings.Contains(string(b), `id="forget"`) {
		t.Errorf("a console with no dead-letter queue offers a dead letter's redrive, or no forget")
	}
}

// A dead letter outlives its record (expired, forgotten, or never made),
// and the run moves it with no record to reset. For such a key the
// confirmation page and the form agree: the message's page offers the
// redrive, the confirmation says there is no record and what the run
// will do, and the confirmed form runs it, the result saying no record
// was reset. A link or form naming no key is refused by both. The DEAD
// outbox entries' confirmation shows a key with no record alike.
func TestConsoleLetterRedriveNoRecord(t *testing.T) {
	srv, _, _, con := memConsole(t, true)
	var runs []string
	con.letters = &letterRedrive{from: "SQS queue orders-dlq", run: func(_ context.Context, keyHash string) (redrive.Report, error) {
		runs = append(runs, keyHash)
		return redrive.Report{Seen: 1, Moved: 1}, nil
	}}
	gone := mustKey(t, "onceq", "order-gone")
	get := func(path string) (int, string) {
		t.Helper()
		res, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	send := func(form url.Values) (int, string) {
		t.Helper()
		return postTo(t, srv, "/redrive-letter", form, nil)
	}

	if status, body := get("/message?stored_key=" + url.QueryEscape(gone)); status != http.StatusOK ||
		!strings.Contains(body, "no record of key_hash "+dedup.KeyHash(gone)) || !strings.Contains(body, `id="redrive-letter"`) {
		t.Errorf("the page of a key with no record: status %d, want it to offer the dead letter's redrive: %s", status, body)
	}
	status, body := get("/redrive-letter?stored_key=" + url.QueryEscape(gone))
	if status != http.StatusOK || !strings.Contains(body, `id="norecord"`) || !strings.Contains(body, "with no record to reset") ||
		!strings.Contains(body, `name="stored_key" value="`+gone+`"`) || !strings.Contains(body, `name="token" value="`+con.token+`"`) {
		t.Fatalf("the confirmation for a key with no record: status %d, want 200 saying so, with the form: %s", status, body)
	}
	if len(runs) != 0 {
		t.Fatalf("the confirmation ran %d redrives", len(runs))
	}
	status, body = send(url.Values{"stored_key": {gone}, "token": {con.token}})
	if status != http.StatusOK || len(runs) != 1 || runs[0] != dedup.KeyHash(gone) || !strings.Contains(body, "with no record to reset: the message runs as a new one") {
		t.Fatalf("the confirmed form for a key with no record: status %d, runs %q: %s", status, runs, body)
	}

	// No key: both refuse, and nothing runs.
	if status, _ := get("/redrive-letter?stored_key="); status != http.StatusBadRequest {
		t.Errorf("a confirmation naming no key: status %d, want 400", status)
	}
	if status, _ := send(url.Values{"stored_key": {""}, "token": {con.token}}); status != http.StatusBadRequest || len(runs) != 1 {
		t.Errorf("a form naming no key: status %d, %d runs; want 400 and no run", status, len(runs))
	}

	// The DEAD outbox entries' confirmation agrees with its form too.
	if status, body := get("/redrive?stored_key=" + url.QueryEscape(gone)); status != http.StatusOK || !strings.Contains(body, `id="norecord"`) {
		t.Errorf("the outbox redrive's confirmation for a key with no record: status %d, want 200 saying so: %s", status, body)
	}
}

// What the result page says of each outcome.
func TestLetterOutcome(t *testing.T) {
	for _, c := range []struct {
		rep  redrive.Report
		want string
	}{
		{redrive.Report{Seen: 1, Moved: 1}, "1 dead letter(s) sent back to the source, the record reset first"},
		{redrive.Report{Seen: 1, Completed: 1}, "NOT sent back: the record is COMPLETED"},
		{redrive.Report{Seen: 1, Held: 1}, "a worker holds the key now"},
		{redrive.Report{Seen: 1, Taken: 1}, "moved by another redrive first"},
		{redrive.Report{Seen: 3, Passed: 3}, "No dead letter of this message is in SQS queue q."},
	} {
		if got := strings.Join(letterOutcome(c.rep, "SQS queue q", false), " "); !strings.Contains(got, c.want) {
			t.Errorf("%+v: %q, want %q", c.rep, got, c.want)
		}
	}
}
