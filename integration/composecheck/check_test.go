package composecheck

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
)

// root is the repository root, two levels up from this module.
var root = func() string {
	abs, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		panic(err)
	}
	return abs
}()

func load(t *testing.T, env map[string]string) (*types.Project, []string) {
	t.Helper()
	path := filepath.Join(root, "docker-compose.yml")
	content, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p, looked, err := Load(context.Background(), path, content, env)
	if err != nil {
		t.Fatalf("docker-compose.yml does not load as Compose would load it: %v", err)
	}
	return p, looked
}

func readRepo(t *testing.T) Repo {
	t.Helper()
	r, err := ReadRepo(root)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestComposeFile loads docker-compose.yml with the environment empty (the
// file's defaults: the SQS route) and with each route chosen, and checks it.
func TestComposeFile(t *testing.T) {
	repo := readRepo(t)
	t.Logf("the worker has %d flags (lease-ttl default %s); the consumer's default MaxAttempts is %d",
		len(repo.WorkerFlags), repo.WorkerFlags["lease-ttl"], repo.MaxAttempts)
	for _, env := range []map[string]string{
		{},
		{"ORDER_WORKER_SOURCE": "kafka"},
		{"ORDER_WORKER_SOURCE": "franz"},
	} {
		t.Run(strings.Join(envList(env), ","), func(t *testing.T) {
			p, looked := load(t, env)
			for _, v := range looked {
				if !slices.Contains(AllowedVariables, v) {
					t.Errorf("docker-compose.yml reads ${%s} from the environment; only %v are expected (each with a default)", v, AllowedVariables)
				}
			}
			for _, err := range Check(p, repo) {
				t.Error(err)
			}
		})
	}
}

func envList(env map[string]string) []string {
	var out []string
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	if len(out) == 0 {
		return []string{"defaults"}
	}
	return out
}

// TestCheckCatches breaks the loaded file one way at a time and expects
// Check to say so: the checks are not vacuous.
func TestCheckCatches(t *testing.T) {
	repo := readRepo(t)
	svc := func(p *types.Project, name string, f func(*types.ServiceConfig)) {
		s, ok := p.Services[name]
		if !ok {
			t.Fatalf("no service %s", name)
		}
		f(&s)
		p.Services[name] = s
	}
	setEnv := func(s *types.ServiceConfig, k, v string) {
		env := types.MappingWithEquals{}
		for key, val := range s.Environment {
			env[key] = val
		}
		env[k] = &v
		s.Environment = env
	}
	for _, tc := range []struct {
		name   string
		mutate func(p *types.Project)
		want   string
	}{
		{"latest tag", func(p *types.Project) {
			svc(p, "kafka", func(s *types.ServiceConfig) { s.Image = "apache/kafka:latest" })
		}, "not latest"},
		{"no tag", func(p *types.Project) {
			svc(p, "sqs", func(s *types.ServiceConfig) { s.Image = "softwaremill/elasticmq-native" })
		}, "no tag"},
		{"latest build image", func(p *types.Project) {
			svc(p, "order-worker", func(s *types.ServiceConfig) {
				b := *s.Build
				b.DockerfileInline = regexp.MustCompile(`(?m)^FROM gcr\.io/distroless/\S+`).ReplaceAllString(b.DockerfileInline, "FROM gcr.io/distroless/static")
				s.Build = &b
			})
		}, "distroless/static\" has no tag"},
		{"no healthcheck", func(p *types.Project) {
			svc(p, "dynamodb", func(s *types.ServiceConfig) { s.HealthCheck = nil })
		}, "dynamodb has no healthcheck"},
		{"a server nothing waits for, without a healthcheck", func(p *types.Project) {
			var ui types.ServiceConfig
			ui.Name, ui.Image = "ui", "softwaremill/elasticmq-ui:1.7.1"
			p.Services["ui"] = ui
		}, "service ui has no healthcheck"},
		{"started only", func(p *types.Project) {
			svc(p, "order-worker", func(s *types.ServiceConfig) {
				deps := types.DependsOnConfig{}
				for k, v := range s.DependsOn {
					deps[k] = v
				}
				deps["dynamodb"] = types.ServiceDependency{Condition: types.ServiceConditionStarted, Required: true}
				s.DependsOn = deps
			})
		}, "creates tables at start but does not wait for dynamodb"},
		{"metrics not published", func(p *types.Project) {
			svc(p, "order-worker", func(s *types.ServiceConfig) { s.Ports = nil })
		}, "metrics port 9464 is not published"},
		{"metrics variable misspelt", func(p *types.Project) {
			svc(p, "order-worker", func(s *types.ServiceConfig) { setEnv(s, "ORDER_WORKER_METRICS_PORT", "9464") })
		}, "ORDER_WORKER_METRICS_PORT is no flag"},
		{"no host listener", func(p *types.Project) {
			svc(p, "kafka", func(s *types.ServiceConfig) { setEnv(s, "KAFKA_ADVERTISED_LISTENERS", "PLAINTEXT://kafka:9092") })
		}, "no listener advertised for the host"},
		{"host listener not in the protocol map", func(p *types.Project) {
			svc(p, "kafka", func(s *types.ServiceConfig) {
				setEnv(s, "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP", "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT")
			})
		}, "not in KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"},
		{"redrive below the bound", func(p *types.Project) {
			cfg := p.Configs["elasticmq"]
			cfg.Content = regexp.MustCompile(`maxReceiveCount = \d+`).ReplaceAllString(cfg.Content, "maxReceiveCount = 5")
			p.Configs["elasticmq"] = cfg
		}, "maxReceiveCount 5 is below 9"},
		{"no dead-letter queue", func(p *types.Project) {
			cfg := p.Configs["elasticmq"]
			cfg.Content = regexp.MustCompile(`(?s)deadLettersQueue \{.*?\}`).ReplaceAllString(cfg.Content, "")
			p.Configs["elasticmq"] = cfg
		}, "has no deadLettersQueue"},
		{"DLQ topic not created", func(p *types.Project) {
			svc(p, "order-worker", func(s *types.ServiceConfig) { setEnv(s, "ORDER_WORKER_KAFKA_DLQ_TOPIC", "orders-dead") })
		}, "creates the Kafka topic orders-dead"},
		{"broker host is localhost", func(p *types.Project) {
			svc(p, "order-worker", func(s *types.ServiceConfig) { setEnv(s, "ORDER_WORKER_KAFKA_BROKERS", "localhost:9092") })
		}, `names host "localhost", which is no service`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := load(t, nil)
			tc.mutate(p)
			errs := Check(p, repo)
			var msgs []string
			for _, err := range errs {
				msgs = append(msgs, err.Error())
			}
			if !slices.ContainsFunc(msgs, func(m string) bool { return strings.Contains(m, tc.want) }) {
				t.Errorf("want a problem saying %q, got %q", tc.want, msgs)
			}
		})
	}
}
