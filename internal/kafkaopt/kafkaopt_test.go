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

type otherConfig struct{ n int }

// Options of one source's client reach that source's configuration, in
// order; another source's are refused, not dropped.
func TestApplyClientOptions(t *testing.T) {
	opts := []Option{
		Func(func(s *Settings) { s.CommitInterval = 3 * time.Second }),
		Client(func(c *oneConfig) { c.name = "first" }),
		Client(func(c *oneConfig) { c.name += ",second" }),
		nil,
	}
	var c oneConfig
	s, err := Apply("one", opts, &c)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if c.name != "first,second" || s.CommitInterval != 3*time.Second || s.Ordering != broker.OrderByKey || s.MaxInFlight != 256 {
		t.Errorf("Apply: config %+v, settings %+v", c, s)
	}

	opts = append(opts, Client(func(c *otherConfig) { c.n = 1 }))
	if _, err := Apply("one", opts, &c); !errors.Is(err, configerr.ErrInvalidConfig) || !strings.Contains(err.Error(), "another Kafka source") ||
		!strings.HasPrefix(err.Error(), "one: ") {
		t.Errorf("Apply with another source's option: %v, want ErrInvalidConfig naming it", err)
	}
}

// Check names the option at fault and wraps ErrInvalidConfig.
func TestCheckNamesTheOption(t *testing.T) {
	valid := func() Settings {
		var c oneConfig
		s, _ := Apply[oneConfig, Option]("one", nil, &c)
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
