package main

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	franz "github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// shareLeft is a share group's lag: per partition, the log end minus the
// records the group has settled (its start offset, and those settled
// above it), summed. A record is settled once accepted, rejected or
// archived, so zero means nothing in flight, released or waiting.
func (b *kafkaBroker) shareLeft(ctx context.Context) (int, string, error) {
	ends, err := b.ends(ctx, b.topic)
	if err != nil {
		return 0, "", err
	}
	cl, err := franz.NewClient(franz.SeedBrokers(b.addr))
	if err != nil {
		return 0, "", err
	}
	defer cl.Close()
	req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
	g := kmsg.NewDescribeShareGroupOffsetsRequestGroup()
	g.GroupID = b.group
	t := kmsg.NewDescribeShareGroupOffsetsRequestGroupTopic()
	t.Topic = b.topic
	for p := range b.partitions {
		t.Partitions = append(t.Partitions, int32(p))
	}
	g.Topics = append(g.Topics, t)
	req.Groups = append(req.Groups, g)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, "", fmt.Errorf("share group offsets of %s: %w", b.group, err)
	}
	lag, end := 0, int64(0)
	for _, e := range ends {
		end += e
	}
	seen := 0
	for _, rg := range resp.Groups {
		if err := kerr.ErrorForCode(rg.ErrorCode); err != nil {
			if err == kerr.GroupIDNotFound {
				return int(end), fmt.Sprintf("%d records, no member joined yet", end), nil
			}
			return 0, "", fmt.Errorf("share group offsets of %s: %w", b.group, err)
		}
		for _, rt := range rg.Topics {
			for _, rp := range rt.Partitions {
				if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
					return 0, "", fmt.Errorf("share group offset of %s/%d: %w", b.topic, rp.Partition, err)
				}
				seen++
				switch {
				case rp.StartOffset < 0: // nothing acquired yet
					lag += int(ends[int(rp.Partition)])
				case rp.Lag >= 0:
					lag += int(rp.Lag)
				default:
					lag += int(max(0, ends[int(rp.Partition)]-rp.StartOffset))
				}
			}
		}
	}
	if seen < b.partitions {
		// Partitions the group has not started on hold all they have.
		return int(end), fmt.Sprintf("%d records, %d of %d partitions started", end, seen, b.partitions), nil
	}
	return lag, fmt.Sprintf("%d records, %d not settled", end, lag), nil
}
