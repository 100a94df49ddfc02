// Command kfakebroker runs an in-memory Kafka-protocol broker (franz-go's
// kfake) on 127.0.0.1, for the example worker and for non-Go clients such as
// kcat, until SIGTERM or SIGINT. It prints its address on stdout, one line,
// once it is listening; everything else goes to stderr.
//
//	kfakebroker -port 9092 -partitions 6 -topics orders,orders-dlq
//	kcat -b 127.0.0.1:9092 -L
//
// Records live in memory only and are lost on exit.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kfakebroker:", err)
		os.Exit(1)
	}
}

func run() error {
	port := flag.Int("port", 9092, "port on 127.0.0.1 (0: pick a free one)")
	partitions := flag.Int("partitions", 3, "partitions of seeded and auto-created topics")
	topics := flag.String("topics", "", "comma-separated topics to create at start")
	autoCreate := flag.Bool("auto-create", true, "create topics on first use (metadata requests that ask for it)")
	verbose := flag.Bool("v", false, "log broker warnings and errors to stderr")
	flag.Parse()
	if *port < 0 || *port > 65535 {
		return fmt.Errorf("-port %d: out of range", *port)
	}
	if *partitions < 1 {
		return fmt.Errorf("-partitions %d: must be at least 1", *partitions)
	}

	// kfake binds 127.0.0.1 itself; Ports also fixes one broker.
	opts := []kfake.Opt{kfake.Ports(*port), kfake.DefaultNumPartitions(*partitions)}
	if *autoCreate {
		opts = append(opts, kfake.AllowAutoTopicCreation())
	}
	var seed []string
	for t := range strings.SplitSeq(*topics, ",") {
		if t = strings.TrimSpace(t); t != "" {
			seed = append(seed, t)
		}
	}
	if len(seed) > 0 {
		opts = append(opts, kfake.SeedTopics(int32(*partitions), seed...))
	}
	if *verbose {
		opts = append(opts, kfake.WithLogger(kfake.BasicLogger(os.Stderr, kfake.LogLevelWarn)))
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return fmt.Errorf("starting kfake: %w", err)
	}
	defer c.Close()
	addr := c.ListenAddrs()[0]
	fmt.Println(addr)
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	log.Info("kfake broker listening", "addr", addr, "partitions", *partitions, "topics", seed, "auto_create", *autoCreate)
	<-ctx.Done()
	log.Info("stopping")
	return nil
}
