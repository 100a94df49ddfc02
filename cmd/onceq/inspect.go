package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/onceq/onceq/dedup"
)

func runInspect(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("onceq inspect", stderr,
		"usage: onceq inspect -table NAME [-namespace onceq] [-stored-key] [-tenant-layout] KEY",
		"Reads the record of KEY with a strongly consistent read and prints it.",
		"KEY is the message's idempotency key, turned into the stored key (<namespace>#<key>,",
		"hashed when too long or not UTF-8) exactly as the consumer does; with -stored-key it is used as is.",
		"Exit 1 when the key has no record.",
	)
	table := fs.String("table", "", "table name (required)")
	ns := fs.String("namespace", "onceq", "the consumer's namespace (consumer.Namespace)")
	stored := fs.Bool("stored-key", false, "KEY is already the stored key, as logged by the consumer")
	tenant := fs.Bool("tenant-layout", false, "the table uses the tenant layout (created with -tenant-layout)")
	if err := fs.Parse(args); err != nil {
		return usageExit(err)
	}
	if *table == "" {
		fmt.Fprintln(stderr, "onceq inspect: -table is required")
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "onceq inspect: exactly one KEY is required (flags go before it)")
		return 2
	}
	key := fs.Arg(0)
	if !*stored {
		k, err := dedup.Key(*ns, key)
		if err != nil {
			fmt.Fprintf(stderr, "onceq inspect: key %q: %v\n", key, err)
			return 2
		}
		key = k
	} else if key == "" {
		fmt.Fprintln(stderr, "onceq inspect: KEY must not be empty")
		return 2
	}
	client, err := dynamoClient(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "onceq inspect: %v\n", err)
		return 1
	}
	store, err := openStore(client, *table, *tenant)
	if err != nil {
		fmt.Fprintf(stderr, "onceq inspect: %v\n", err)
		return 1
	}
	rec, err := store.Get(ctx, key)
	if errors.Is(err, dedup.ErrNotFound) {
		fmt.Fprintf(stderr, "onceq inspect: no record for stored key %q in table %s\n", key, *table)
		return 1
	}
	if err != nil {
		fmt.Fprintf(stderr, "onceq inspect: %v\n", err)
		return 1
	}
	printRecord(stdout, rec, time.Now())
	return 0
}

func printRecord(w io.Writer, r dedup.Record, now time.Time) {
	fmt.Fprintf(w, "key:        %s\n", r.Key)
	fmt.Fprintf(w, "status:     %s\n", r.Status)
	fmt.Fprintf(w, "version:    %d\n", r.Version)
	fmt.Fprintf(w, "expires:    %s (%s)\n", r.ExpiresAt.UTC().Format(time.RFC3339), relative(r.ExpiresAt, now))
	fmt.Fprintf(w, "attempts:   %d\n", r.Attempts)
	fmt.Fprintf(w, "response:   %d bytes\n", len(r.Response))
	fmt.Fprintf(w, "owner:      %s\n", r.Owner)
	if !r.CreatedAt.IsZero() {
		fmt.Fprintf(w, "created:    %s\n", r.CreatedAt.UTC().Format(time.RFC3339))
	}
	if r.LastError != "" {
		fmt.Fprintf(w, "last error: %s\n", r.LastError)
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
