package logref_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/onceq/onceq/internal/logref"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

func TestInheritedUnlessGiven(t *testing.T) {
	var given, inherited testenv.LogBuffer
	own := logref.New(given.Logger(slog.LevelInfo))
	none := logref.New(nil)
	ownLog, noneLog := own.Logger().With("component", "a"), none.Logger().With("component", "b")

	own.Inherit(inherited.Logger(slog.LevelInfo))
	none.Inherit(inherited.Logger(slog.LevelInfo))
	ownLog.Info("from a")
	noneLog.WithGroup("g").Info("from b", "k", 1)

	if got := given.String(); !strings.Contains(got, "from a") || !strings.Contains(got, "component=a") || strings.Contains(got, "from b") {
		t.Errorf("a component given a logger must keep it: %q", got)
	}
	// Taken before Inherit, the logger follows it, with its attributes.
	if got := inherited.String(); !strings.Contains(got, "from b") || !strings.Contains(got, "component=b") ||
		!strings.Contains(got, "g.k=1") || strings.Contains(got, "from a") {
		t.Errorf("a component given none must log to the inherited logger: %q", got)
	}
}

func TestDefaultFollowsSlogDefault(t *testing.T) {
	var buf testenv.LogBuffer
	old := slog.Default()
	t.Cleanup(func() { slog.SetDefault(old) })
	log := logref.New(nil).Logger()
	slog.SetDefault(buf.Logger(slog.LevelWarn))
	log.Info("quiet")
	log.Warn("heard")
	if got := buf.String(); !strings.Contains(got, "heard") || strings.Contains(got, "quiet") {
		t.Errorf("with nothing given or inherited, slog.Default() at the time of logging: %q", got)
	}
}
