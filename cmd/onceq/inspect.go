package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/outbox"
	"github.com/onceq/onceq/sources/kafkasource"
)

// defaultScanLimit bounds what one -key-hash lookup can cost: a few
// thousand items is a few hundred read units at most.
const defaultScanLimit = 5000

func runInspect(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("onceq inspect", stderr,
		"usage: onceq inspect -table NAME [-tenant-layout [-shards N]] [-response [-raw]] WHICH",
		"       onceq inspect -store postgres [-table NAME] [-postgres-url URL] [-response [-raw]] WHICH",
		"       onceq inspect -store redis [-redis-addr HOST:PORT|URL] [-redis-prefix onceq:] [-response [-raw]] WHICH",
		"Prints the record of one idempotency key, read with a strongly consistent read. WHICH is one of:",
		"  [-tenant T] [-namespace onceq] [-stored-key] KEY",
		"      the message's idempotency key, turned into the stored key <namespace>#<KEY> as the consumer does",
		"      (<T>#!#<namespace>#<KEY> with -tenant, for a consumer with WithTenantFunc; implies -tenant-layout)",
		"      -shards N: the store's TenantShards, which decides the record's partition key",
		fmt.Sprintf("  -key-hash H [-scan-limit %d]", defaultScanLimit),
		"      the key_hash of a log line or error text; scans the table (read capacity for every item read);",
		"      a sharded tenant's record is found without -shards",
		"  [-namespace onceq] -kafka-topic T [-kafka-key K] [-kafka-value V | -kafka-value-file F]",
		"      a Kafka record: its key is computed as the Kafka sources do (kafkasource.Fingerprint)",
		"  [-namespace onceq] -kafka-header-key K",
		"      a Kafka record that carries an idempotency-key header",
		"  -tenant T [-since 1h] [-shards N] [-limit 100]",
		"      the records a tenant (table made with -tenant-layout, consumer.WithTenantFunc) created since then:",
		"      a Query of the tenant's partition key(s), never a Scan; it reads every record of the tenant.",
		"      A table of the default layout is an error; a listing cut at -limit says so",
		"      (DynamoDB's tenant layout only)",
		"  -status PENDING|COMPLETED|FAILED|DEAD_LETTER [-tenant T] [-since 1h] [-limit 100]",
		"      the records in that status created since then (DEAD_LETTER: the dead letters kept in the store):",
		"      PostgreSQL selects them; DynamoDB Scans the table (read capacity for every item read), or with",
		"      -tenant Queries the tenant's partition keys; Redis SCANs the names under the prefix",
		"  -outbox DEAD|PENDING|DISPATCHED [-limit 100]",
		"      the outbox entries in that state (-store postgres or dynamodb): DEAD lists what a destination",
		"      refused for good, with the reason",
		"PostgreSQL and Redis find a record by KEY (-tenant T too) or -key-hash: PostgreSQL hashes each key it reads",
		"on the server; Redis SCANs the names under the prefix, which hold the key's SHA-256 (Redis keeps no key).",
		"Exit 1 when no record is found.",
		"Stored strings are printed with control characters, invalid bytes and Unicode bidirectional",
		"controls (U+202A-U+202E, U+2066-U+2069, ...) escaped.",
	)
	table := fs.String("table", "", "table name (required; -store postgres: default "+dedup.DefaultTable+")")
	sf := addStoreFlags(fs)
	ns := fs.String("namespace", "onceq", "the consumer's namespace (consumer.Namespace)")
	stored := fs.Bool("stored-key", false, "KEY already has its namespace (<namespace>#<key>): use it as is")
	tenant := fs.Bool("tenant-layout", false, "the table uses the tenant layout (created with -tenant-layout)")
	response := fs.Bool("response", false, "print only the stored response, control characters escaped")
	raw := fs.Bool("raw", false, "with -response: write the response's bytes exactly as stored (to pipe or save them)")
	keyHash := fs.String("key-hash", "", "find the record whose key has this key_hash (12 hex digits), by scanning the table")
	scanLimit := fs.Int("scan-limit", defaultScanLimit,
		"-key-hash reads at most this many items; a scan costs read capacity for every item read\n"+
			"(about 0.5 unit per 4 KB of items read), and no writes")
	tenantName := fs.String("tenant", "", "list this tenant's records; with a KEY, the key of this tenant (tenant layout)")
	since := fs.Duration("since", time.Hour, "with -tenant or -status: records created within this long")
	shards := fs.Int("shards", 1, "tenant layout: the store's TenantShards (n of dynamostore.TenantShards)")
	limit := fs.Int("limit", 100, "with -tenant and no KEY, or -status: list at most this many records")
	status := fs.String("status", "", "list the records in this status (PENDING, COMPLETED, FAILED, DEAD_LETTER), up to -limit")
	var k kafkaRecord
	fs.StringVar(&k.topic, "kafka-topic", "", "the Kafka record's topic")
	fs.StringVar(&k.key, "kafka-key", "", "the Kafka record's key (none: leave out)")
	fs.StringVar(&k.value, "kafka-value", "", "the Kafka record's value")
	fs.StringVar(&k.valueFile, "kafka-value-file", "", "a file holding the Kafka record's value, byte for byte")
	fs.StringVar(&k.header, "kafka-header-key", "", "the Kafka record's idempotency-key header")
	outboxState := fs.String("outbox", "", "list the store's outbox entries in this state (DEAD, PENDING, DISPATCHED), up to -limit")
	if err := fs.Parse(args); err != nil {
		return usageExit(err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["outbox"] {
		return inspectOutbox(ctx, fs, sf, *table, outbox.State(strings.ToUpper(*outboxState)), *limit, stdout, stderr)
	}
	kafka := set["kafka-topic"] || set["kafka-key"] || set["kafka-value"] || set["kafka-value-file"] || set["kafka-header-key"]
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "onceq inspect: "+format+"\n", a...)
		return 2
	}
	// -tenant with a KEY (or -kafka-*) names that tenant's key; without,
	// it lists the tenant's records.
	tenantListing := set["tenant"] && fs.NArg() == 0 && !kafka
	listing := tenantListing || set["status"]
	switch {
	case sf.problem(fs) != "":
		return usageErr("%s", sf.problem(fs))
	case sf.store != storeDynamo && (tenantListing || set["tenant-layout"] || set["shards"]):
		return usageErr("-tenant-layout, -shards and -tenant without KEY (a listing) are DynamoDB's: give KEY or -key-hash")
	case sf.store == storeRedis && *table != "":
		return usageErr("Redis has no table: its records are keys under -redis-prefix")
	case *table == "" && sf.store == storeDynamo:
		return usageErr("-table is required")
	case set["tenant"] && (set["key-hash"] || *stored || (listing && set["namespace"])):
		return usageErr("-tenant lists a tenant's records, or with KEY names that tenant's key: give no -key-hash, -stored-key (the stored key has its tenant), or -namespace without KEY")
	case (set["since"] || set["limit"]) && !listing:
		return usageErr("-since and -limit go with -tenant and no KEY (a listing), or -status, only")
	case set["status"] && (fs.NArg() > 0 || kafka || set["key-hash"] || *stored):
		return usageErr("-status lists records: give no KEY, -key-hash, -kafka-* or -stored-key")
	case set["status"] && !slices.Contains([]dedup.Status{dedup.StatusPending, dedup.StatusCompleted, dedup.StatusFailed, dedup.StatusDeadLetter}, dedup.Status(strings.ToUpper(*status))):
		return usageErr("-status %q: want PENDING, COMPLETED, FAILED or DEAD_LETTER", *status)
	case set["shards"] && !tenantListing && !*tenant && !set["tenant"]:
		return usageErr("-shards goes with the tenant layout (-tenant-layout or -tenant) only")
	case *since <= 0 || *shards < 1 || *shards > 1000 || *limit < 1:
		return usageErr("-since and -limit must be positive, -shards 1 to 1000")
	case listing:
		f := dedup.ListFilter{Status: dedup.Status(strings.ToUpper(*status)), Limit: *limit}
		if tenantListing {
			f.Tenant = *tenantName
		}
		return listRecords(ctx, stdout, stderr, sf, *table, f, *since, *shards, *response)
	case set["key-hash"] && kafka:
		return usageErr("-key-hash and -kafka-* flags each name a record: give one")
	case (set["key-hash"] || kafka) && fs.NArg() > 0:
		return usageErr("KEY %q as well as -key-hash or -kafka-*: give one", fs.Arg(0))
	case (set["key-hash"] || kafka) && *stored:
		return usageErr("-stored-key goes with KEY only")
	case *raw && !*response:
		return usageErr("-raw goes with -response only")
	case set["scan-limit"] && !set["key-hash"]:
		return usageErr("-scan-limit goes with -key-hash only")
	case set["key-hash"] && set["namespace"]:
		return usageErr("-namespace goes with KEY or -kafka-*: a key hash already covers the namespace")
	case !set["key-hash"] && !kafka && fs.NArg() != 1:
		return usageErr("exactly one KEY is required (flags go before it), or -key-hash, or -kafka-*")
	}

	q := lookup{scanLimit: *scanLimit, kafka: kafka, response: *response, raw: *raw}
	if set["key-hash"] {
		q.keyHash = strings.ToLower(strings.TrimSpace(*keyHash))
		if len(q.keyHash) != len(dedup.KeyHash("k")) || strings.Trim(q.keyHash, "0123456789abcdef") != "" {
			return usageErr("-key-hash %q: a key_hash is 12 hex digits, as logs print it", q.keyHash)
		}
		if *scanLimit < 1 {
			return usageErr("-scan-limit must be at least 1")
		}
	} else {
		var tenantOf *string
		if set["tenant"] {
			tenantOf, *tenant = tenantName, true
		}
		var code int
		if q.key, code = recordKey(fs, k, kafka, *ns, *stored, tenantOf, stderr); code != 0 {
			return code
		}
	}
	ins, err := openInspector(ctx, sf, inspectAt{table: *table, tenant: *tenant, shards: *shards})
	if err != nil {
		fmt.Fprintf(stderr, "onceq inspect: %s\n", field(err.Error()))
		return 1
	}
	defer ins.close()
	return ins.find(ctx, q, stdout, stderr)
}

// lookup is the record inspect looks for: by its stored key, or by
// keyHash, reading at most scanLimit.
type lookup struct {
	key, keyHash  string
	scanLimit     int
	kafka         bool // the key is a Kafka record's
	response, raw bool
}

// recordKey is the stored key of the record the operator names: KEY
// (as it is with -stored-key), or a Kafka record's; of *tenant when not
// nil. A non-zero code ends the command.
func recordKey(fs *flag.FlagSet, k kafkaRecord, kafka bool, ns string, stored bool, tenant *string, stderr io.Writer) (string, int) {
	usageErr := func(format string, a ...any) (string, int) {
		fmt.Fprintf(stderr, "onceq inspect: "+format+"\n", a...)
		return "", 2
	}
	var key string
	if kafka {
		fp, code := k.fingerprint(stderr)
		if code != 0 {
			return "", code
		}
		// Without a header the fingerprint is derived from the record, and
		// stored as a derived key.
		keyOf := dedup.Key
		if k.header == "" {
			keyOf = dedup.DerivedKey
		}
		var err error
		if key, err = keyOf(ns, fp); err != nil {
			return usageErr("%s", field(err.Error()))
		}
	} else {
		key = fs.Arg(0)
		if !stored {
			k, err := dedup.Key(ns, key)
			if err != nil {
				return usageErr("key %q: %v", key, err)
			}
			key = k
		} else if key == "" {
			return usageErr("KEY must not be empty")
		}
	}
	if tenant != nil {
		var err error
		if key, err = dedup.TenantKey(*tenant, key); err != nil {
			return usageErr("-tenant %q: %v", *tenant, err)
		}
	}
	return key, 0
}

// find prints the record q names, or says why there is none.
func (ins *inspected) find(ctx context.Context, q lookup, stdout, stderr io.Writer) int {
	var recs []dedup.Record
	if q.keyHash != "" {
		res, err := ins.FindKeyHash(ctx, q.keyHash, q.scanLimit)
		if err != nil {
			fmt.Fprintf(stderr, "onceq inspect: %s\n", field(err.Error()))
			return 1
		}
		if code := ins.printSearch(stderr, res, q.keyHash, q.scanLimit); code != 0 {
			return code
		}
		recs = res.Records
	} else {
		rec, err := ins.Get(ctx, q.key)
		if errors.Is(err, dedup.ErrNotFound) {
			// The key is the operator's own, given on the command line.
			fmt.Fprintf(stderr, "onceq inspect: no record for stored key %q in %s\n", q.key, ins.where)
			if ins.notFound != "" {
				fmt.Fprintln(stderr, ins.notFound)
			}
			if q.kafka {
				fmt.Fprintln(stderr, "onceq inspect: topic, record key and value must be the record's byte for byte: a trailing newline counts")
			}
			return 1
		}
		if err != nil {
			fmt.Fprintf(stderr, "onceq inspect: %s\n", field(err.Error()))
			return 1
		}
		recs = []dedup.Record{rec}
	}
	for i := range recs {
		if recs[i].Key == "" {
			recs[i].Key = "(not stored: " + ins.noKey + ", key_hash " + q.keyHash + ")"
		}
	}
	return printRecords(stdout, stderr, q.response, q.raw, recs)
}

// listRecords prints the records f selects created within since, up to
// f.Limit.
func listRecords(ctx context.Context, stdout, stderr io.Writer, sf *storeFlags, table string, f dedup.ListFilter, since time.Duration, shards int, response bool) int {
	byTenant := f.Tenant != ""
	if response {
		fmt.Fprintf(stderr, "onceq inspect: -response goes with one record, not %s\n", map[bool]string{true: "-tenant", false: "-status"}[byTenant])
		return 2
	}
	ins, err := openInspector(ctx, sf, inspectAt{table: table, tenant: byTenant, shards: shards, listing: byTenant})
	if err != nil {
		fmt.Fprintf(stderr, "onceq inspect: %s\n", field(err.Error()))
		return 1
	}
	defer ins.close()
	now := time.Now()
	limit := f.Limit
	// One more than the limit tells whether the listing was cut.
	f.Since, f.Limit = now.Add(-since), limit+1
	recs, err := ins.List(ctx, f)
	if err != nil {
		fmt.Fprintf(stderr, "onceq inspect: %s\n", field(err.Error()))
		return 1
	}
	// What was listed, and what it read: a tenant's listing is a Query.
	what, cost := fmt.Sprintf("tenant %q", f.Tenant), ins.listCost
	switch {
	case !byTenant:
		what, cost = "status "+string(f.Status), ""
	case f.Status != "":
		what += ", status " + string(f.Status)
	}
	if len(recs) > limit {
		recs = recs[:limit]
		fmt.Fprintf(stderr, "%s: the first %d records created in the last %v in %s, and more (-limit %d): raise -limit to list them all%s\n",
			what, len(recs), since, ins.where, limit, cost)
	} else {
		fmt.Fprintf(stderr, "%s: %d records created in the last %v in %s%s\n", what, len(recs), since, ins.where, cost)
	}
	for i, r := range recs {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		if r.Key == "" {
			r.Key = "(not stored: " + ins.noKey + ")"
		}
		printRecord(stdout, r, now)
	}
	if len(recs) == 0 {
		return 1
	}
	return 0
}

// tenantTable says why table cannot list records by tenant: it has no sort
// key, so it was not made in the tenant layout.
func tenantTable(ctx context.Context, client *ddb.Client, table string) error {
	out, err := client.DescribeTable(ctx, &ddb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		return err
	}
	if out.Table != nil {
		for _, k := range out.Table.KeySchema {
			if k.KeyType == types.KeyTypeRange {
				return nil
			}
		}
	}
	return fmt.Errorf("table %s is not in the tenant layout (it has no sort key; made without -tenant-layout): its records cannot be listed by tenant", table)
}

func units(u float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.1f", u), "0"), ".")
}

// kafkaRecord is what the operator knows of a Kafka record.
type kafkaRecord struct {
	topic, key, value, valueFile, header string
}

// fingerprint is the record's idempotency key, from the very function the
// Kafka sources key records with, so the two cannot drift apart.
func (k kafkaRecord) fingerprint(stderr io.Writer) (string, int) {
	if k.header == "" && k.topic == "" {
		fmt.Fprintln(stderr, "onceq inspect: -kafka-topic is required, unless the record has an idempotency-key header (-kafka-header-key)")
		return "", 2
	}
	body := []byte(k.value)
	if k.valueFile != "" {
		if k.value != "" {
			fmt.Fprintln(stderr, "onceq inspect: -kafka-value and -kafka-value-file each give the value: give one")
			return "", 2
		}
		b, err := os.ReadFile(k.valueFile)
		if err != nil {
			fmt.Fprintf(stderr, "onceq inspect: -kafka-value-file: %s\n", field(err.Error()))
			return "", 1
		}
		body = b
	}
	m := &broker.Message{OrderingKey: k.key, Body: body, Origin: broker.Origin{System: "kafka", Destination: k.topic}}
	if k.header != "" {
		m.Attributes = map[string]string{broker.IdempotencyKeyAttribute: k.header}
	}
	fp, err := kafkasource.Fingerprint(m)
	if err != nil {
		fmt.Fprintf(stderr, "onceq inspect: %s\n", field(err.Error()))
		return "", 1
	}
	return fp, 0
}

// printResponse writes the response, its control characters and invalid
// bytes escaped unless raw asks for it exactly as stored (to pipe or save
// it); what is not plain text is said on stderr.
func printResponse(stdout, stderr io.Writer, r dedup.Record, raw bool) {
	if len(r.Response) == 0 {
		fmt.Fprintf(stderr, "onceq inspect: the record stores no response (status %s)\n", r.Status)
		return
	}
	switch {
	case raw:
		_, _ = stdout.Write(r.Response)
		if !printable(string(r.Response)) {
			fmt.Fprintf(stderr, "onceq inspect: the response is %d bytes that are not printable UTF-8 text, written as they are: pipe them to a file or through base64\n", len(r.Response))
		}
	case printable(string(r.Response)):
		_, _ = stdout.Write(r.Response)
	default:
		_, _ = io.WriteString(stdout, escape(string(r.Response)))
		fmt.Fprintf(stderr, "onceq inspect: the response is %d bytes that are not printable UTF-8 text, shown escaped: -raw writes them as stored\n", len(r.Response))
	}
}

// printable: valid UTF-8 with no control characters but tab and newline
// (a carriage return could overwrite what was printed), and no Unicode
// bidirectional controls (which make text read as other text).
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) && r != '\t' && r != '\n' || unicode.Is(unicode.Bidi_Control, r) {
			return false
		}
	}
	return true
}

// escape writes control characters (but tab and newline), bidirectional
// controls and invalid bytes of s as Go escapes, so stored bytes cannot drive the terminal.
func escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\t' || r == '\n':
			b.WriteRune(r)
		case unicode.IsControl(r), unicode.Is(unicode.Bidi_Control, r):
			// A bidirectional control (U+202A-U+202E, U+2066-U+2069, ...)
			// reorders what the terminal shows after it.
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func printRecord(w io.Writer, r dedup.Record, now time.Time) {
	fmt.Fprintf(w, "key:        %s\n", field(r.Key))
	fmt.Fprintf(w, "status:     %s\n", field(string(r.Status)))
	fmt.Fprintf(w, "version:    %d\n", r.Version)
	fmt.Fprintf(w, "expires:    %s (%s)\n", r.ExpiresAt.UTC().Format(time.RFC3339), relative(r.ExpiresAt, now))
	fmt.Fprintf(w, "attempts:   %d\n", r.Attempts)
	if r.Takeovers > 0 {
		fmt.Fprintf(w, "takeovers:  %d (of an abandoned lease)\n", r.Takeovers)
	}
	if len(r.Response) > 0 {
		fmt.Fprintf(w, "response:   %d bytes (print them with -response)\n", len(r.Response))
	} else {
		fmt.Fprintln(w, "response:   0 bytes")
	}
	fmt.Fprintf(w, "owner:      %s\n", field(r.Owner))
	if !r.CreatedAt.IsZero() {
		fmt.Fprintf(w, "created:    %s\n", r.CreatedAt.UTC().Format(time.RFC3339))
	}
	if r.LastError != "" {
		fmt.Fprintf(w, "last error: %s\n", field(r.LastError))
	}
}

// relative says how far expiry is from now, the way an operator reads it:
// "in 5m", "expired 2m ago". Expiry is stored in whole seconds, so finer
// precision would be noise.
func relative(exp, now time.Time) string {
	d := exp.Sub(now).Round(time.Second)
	switch {
	case d > 0:
		return "in " + short(d)
	case d < 0:
		return "expired " + short(-d) + " ago"
	default:
		return "expires now"
	}
}

func short(d time.Duration) string {
	s := d.String() // "1h0m0s", "5m10s"
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
