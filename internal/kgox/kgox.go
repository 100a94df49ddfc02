// Package kgox holds what package franzsource and package franztxn both
// need of franz-go's client: its logger on log/slog, and the check that
// topics exist.
package kgox

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Logger passes franz-go's messages to l: errors and warnings at warn,
// the rest at debug.
type Logger struct{ L *slog.Logger }

// Level is the most detailed level l takes.
func (k Logger) Level() kgo.LogLevel {
	ctx := context.Background()
	switch {
	case k.L.Enabled(ctx, slog.LevelDebug):
		return kgo.LogLevelInfo
	case k.L.Enabled(ctx, slog.LevelWarn):
		return kgo.LogLevelWarn
	}
	return kgo.LogLevelNone
}

// Log logs one of franz-go's messages.
func (k Logger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	keyvals = append(keyvals, "component", "franz-go")
	if level <= kgo.LogLevelWarn {
		k.L.Warn(msg, keyvals...)
		return
	}
	k.L.Debug(msg, keyvals...)
}

// CheckTopics proves, from the brokers' metadata, that topics exist; a
// missing one wraps unknown (the callers' kafkagroup.ErrUnknownTopic,
// passed in so that this package imports nothing of onceq). pkg prefixes
// the other errors.
func CheckTopics(ctx context.Context, cl *kgo.Client, pkg string, topics []string, unknown error) error {
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = false
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("%s: reading metadata of %v: %w", pkg, topics, err)
	}
	for _, t := range topics {
		i := slices.IndexFunc(resp.Topics, func(rt kmsg.MetadataResponseTopic) bool { return rt.Topic != nil && *rt.Topic == t })
		if i < 0 {
			return fmt.Errorf("%w: %q", unknown, t)
		}
		if err := kerr.ErrorForCode(resp.Topics[i].ErrorCode); err != nil {
			if err == kerr.UnknownTopicOrPartition {
				return fmt.Errorf("%w: %q: %w", unknown, t, err)
			}
			return fmt.Errorf("%s: metadata of %q: %w", pkg, t, err)
		}
	}
	return nil
}
