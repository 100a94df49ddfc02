package kafkaopt

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/configerr"
)

type oneConfig struct{ name string }

// Shared options and the source's own reach the settings and the source's
// configuration, in the order given, through either client's method; nil
// options are skipped.
func TestApplyOwnOptions(t *testing.T) {
	commit := Func(func(s *Settings) { s.CommitInterval = 3 * time.Second })
	check := func(what string, s Settings, c oneConfig) {
		t.Helper()
		if c.name != "first,second" || s.CommitInterval != 3*time.Second || s.Ordering != broker.OrderByKey || s.MaxInFlight != 256 || s.own != nil {
			t.Errorf("%s: config %+v, settings %+v", what, c, s)
		}
	}
	var k oneConfig
	s := ApplyKafkaGo([]KafkaGo{commit, KafkaGoOnly(func(c *oneConfig) { c.name = "first" }), nil,
		KafkaGoOnly(func(c *oneConfig) { c.name += ",second" })}, &k)
	check("ApplyKafkaGo", s, k)
	var f oneConfig
	s = ApplyFranz([]Franz{FranzOnly(func(c *oneConfig) { c.name = "first" }), commit,
		FranzOnly(func(c *oneConfig) { c.name += ",second" })}, &f)
	check("ApplyFranz", s, f)
}

// Check names the option at fault and wraps ErrInvalidConfig.
func TestCheckNamesTheOption(t *testing.T) {
	valid := func() Settings {
		var c oneConfig
		s := ApplyKafkaGo[oneConfig, KafkaGo](nil, &c)
		s.Default(3*time.Second, 30*time.Second, 30*time.Second, 1<<20)
		return s
	}
	if s := valid(); s.Check("one") != nil {
		t.Fatalf("defaults refused: %v", s.Check("one"))
	}
	for option, spoil := range map[string]func(*Settings){
		"Ordering":                func(s *Settings) { s.Ordering = 7 },
		"MaxInFlightPerPartition": func(s *Settings) { s.MaxInFlight = 0 },
		"MaxInFlightBytes":        func(s *Settings) { s.MaxInFlightBytes = 0 },
		"CommitInterval":          func(s *Settings) { s.CommitInterval = 0 },
		"RevokeTimeout":           func(s *Settings) { s.RevokeTimeout = time.Minute },
		"HeartbeatInterval":       func(s *Settings) { s.Heartbeat = -1 },
		"FetchMaxWait":            func(s *Settings) { s.FetchMaxWait = 0 },
		"FetchMaxBytes":           func(s *Settings) { s.FetchMaxBytes = 1 << 40 },
		"OffsetReset":             func(s *Settings) { s.Reset = 9 },
	} {
		s := valid()
		spoil(&s)
		err := s.Check("one")
		if !errors.Is(err, configerr.ErrInvalidConfig) || !strings.Contains(err.Error(), "option "+option) {
			t.Errorf("%s spoilt: %v, want ErrInvalidConfig naming the option", option, err)
		}
	}
}

// Join applies its options in order through either client's method,
// skipping nil ones, and keeps them as they were when it was called.
func TestJoin(t *testing.T) {
	list := []Shared{Func(func(s *Settings) { s.DeadLetterTopic += "a" }), nil, Func(func(s *Settings) { s.DeadLetterTopic += "b" })}
	j := Join(list)
	list[0] = Func(func(s *Settings) { s.DeadLetterTopic += "x" })
	var c oneConfig
	if s := ApplyKafkaGo([]KafkaGo{j}, &c); s.DeadLetterTopic != "ab" {
		t.Errorf("ApplyKafkaGo of Join: %q, want ab", s.DeadLetterTopic)
	}
	if s := ApplyFranz([]Franz{j, j}, &c); s.DeadLetterTopic != "abab" {
		t.Errorf("ApplyFranz of Join twice: %q, want abab", s.DeadLetterTopic)
	}
}
