package kafkaboth_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A program that gives either source kafkagroup's options (one by one or
// as kafkagroup.Options) and that source's own compiles.
const optionsBuild = `package options

import (
	"context"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/onceq/onceq/sources/franzsource"
	"github.com/onceq/onceq/sources/kafkagroup"
	"github.com/onceq/onceq/sources/kafkasource"
)

func open(ctx context.Context) {
	shared := []kafkagroup.Option{kafkagroup.DeadLetterTopic("dlq"), kafkagroup.CommitInterval(time.Second)}
	_, _ = kafkasource.New(ctx, nil, "g", nil, kafkagroup.Options(shared...), kafkagroup.FetchMaxWait(time.Second),
		kafkasource.WithDialer(&kafkago.Dialer{}), kafkasource.JoinGroupBackoff(time.Second))
	_, _ = franzsource.New(ctx, nil, "g", nil, kafkagroup.Options(shared...), kafkagroup.FetchMaxWait(time.Second),
		franzsource.ClientID("x"), franzsource.GroupProtocol(franzsource.Eager))
	_, _ = kafkasource.NewBatch(ctx, nil, "g", nil, nil, kafkagroup.Options(shared...), kafkasource.JoinGroupBackoff(time.Second))
	_, _ = franzsource.NewBatch(ctx, nil, "g", nil, nil, kafkagroup.Options(shared...), franzsource.InstanceID("i"))
}
`

// Each line of optionsRefused gives an option of one client to the other
// client's source, or to a list meant for both.
var optionsRefused = []string{
	`_, _ = franzsource.New(ctx, nil, "g", nil, kafkagroup.CommitInterval(time.Second), kafkasource.WithDialer(&kafkago.Dialer{}))`,
	`_, _ = franzsource.NewBatch(ctx, nil, "g", nil, nil, kafkasource.JoinGroupBackoff(time.Second))`,
	`_, _ = kafkasource.New(ctx, nil, "g", nil, kafkagroup.CommitInterval(time.Second), franzsource.ClientID("x"))`,
	`_, _ = kafkasource.NewBatch(ctx, nil, "g", nil, nil, franzsource.TLS(nil))`,
	`_ = kafkagroup.Options(franzsource.InstanceID("i"))`,
	`_ = []kafkagroup.Option{kafkasource.JoinGroupBackoff(time.Second)}`,
}

// An option that only one Kafka client understands does not compile when
// given to the other client's source: the compiler refuses each line of
// optionsRefused, naming it, while the program that gives each source its
// own options, and kafkagroup's, compiles.
func TestOtherSourcesOptionDoesNotCompile(t *testing.T) {
	t.Parallel()
	// The refused lines take the place of open's closing brace.
	var refused strings.Builder
	refused.WriteString(strings.TrimSuffix(optionsBuild, "}\n"))
	firstLine := strings.Count(optionsBuild, "\n")
	for _, l := range optionsRefused {
		refused.WriteString("\t" + l + "\n")
	}
	refused.WriteString("}\n")

	t.Run("own and shared", func(t *testing.T) {
		t.Parallel()
		if out, err := goBuild(t, optionsBuild); err != nil {
			t.Fatalf("a program giving each source its own options does not compile: %v\n%s", err, out)
		}
	})
	t.Run("other client's", func(t *testing.T) {
		t.Parallel()
		out, err := goBuild(t, refused.String())
		if err == nil {
			t.Fatalf("a program giving each source the other client's options compiles")
		}
		for i, l := range optionsRefused {
			at := fmt.Sprintf("options.go:%d:", firstLine+i)
			found := false
			for line := range strings.Lines(out) {
				if strings.Contains(line, at) && strings.Contains(line, "does not implement") && strings.Contains(line, "missing method apply") {
					found = true
				}
			}
			if !found {
				t.Errorf("no type error for %s (line %d):\n%s", l, firstLine+i, out)
			}
		}
	})
}

// goBuild compiles src, one file of a package, against this tree and
// returns what the compiler said.
func goBuild(t *testing.T, src string) (string, error) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "options.go")
	if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	// -gcflags=-e: every error, not the first ten.
	build := exec.Command("go", "build", "-gcflags=-e", file)
	build.Dir = "." // this module, which requires both sources
	out, err := build.CombinedOutput()
	return string(out), err
}
