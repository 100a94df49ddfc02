package dedup_test

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/onceq/onceq/dedup"
)

// The key a Store holds is "<namespace>#<idempotency key>", the namespace
// being the consumer's Namespace option ("onceq" by default). Logs and
// error texts never carry it: they carry its KeyHash, which `onceq
// inspect -key-hash` takes to find the record.
func ExampleKey() {
	key, err := dedup.Key("orders", "order-42")
	if err != nil {
		panic(err)
	}
	fmt.Println("stored key:", key)
	fmt.Println("key_hash:  ", dedup.KeyHash(key))

	// A message without an idempotency key is keyed by its body's SHA-256.
	key, hash, err := dedup.BodyKey("orders", []byte(`{"order_id":"o-1"}`))
	if err != nil {
		panic(err)
	}
	fmt.Println("body key:  ", key)
	fmt.Println("same hash: ", hash == dedup.PayloadHash([]byte(`{"order_id":"o-1"}`)))

	_, err = dedup.Key("orders", "")
	fmt.Println("empty:     ", errors.Is(err, dedup.ErrEmptyKey))
	// Output:
	// stored key: orders#order-42
	// key_hash:   afd204aebd95
	// body key:   orders#21fbcc9a1180d3749842735ce7bfc5af1928fae94c44031deefd1dcd721d48a5
	// same hash:  true
	// empty:      true
}

// A Store, a hook or a handler that logs about a record logs its KeyHash:
// keys may hold personal data (an e-mail address, an account number).
func ExampleKeyHash() {
	// No timestamps, so the output is stable.
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Attr{}
			}
			return a
		},
	}))
	key, _ := dedup.Key("signups", "alice@example.com")
	logger.Info("claim lost", "key_hash", dedup.KeyHash(key))
	// Output:
	// level=INFO msg="claim lost" key_hash=2ffb751a9270
}
