// Package composecheck checks the repository's docker-compose.yml without a
// Docker engine: Load parses it with the Compose specification's own loader
// (compose-go: schema validation, interpolation), and Check asserts what the
// file promises its users: pinned images, healthchecks that gate the worker,
// a DLQ and redrive policy that agree with `onceq check`, the Kafka topics,
// a Kafka listener for the host, the worker's metrics port, and a
// .dockerignore for the build context.
//
// It is a module of its own so that the library's users never inherit
// compose-go; `make test` runs its tests (integration/run-tests.sh).
package composecheck

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/distribution/reference"
)

// AllowedVariables are the only variables the file may read from the
// user's environment, each with a default in the file.
var AllowedVariables = []string{"ORDER_WORKER_SOURCE"}

// Load reads content (the compose file at path) as Docker Compose would,
// with env as the whole environment: the schema is validated and
// ${VAR:-default} interpolated. It also returns the variables the file
// looked up.
func Load(ctx context.Context, path string, content []byte, env map[string]string) (*types.Project, []string, error) {
	var looked []string
	details := types.ConfigDetails{
		WorkingDir:  filepath.Dir(path),
		ConfigFiles: []types.ConfigFile{{Filename: path, Content: content}},
		Environment: types.Mapping(env),
	}
	record := func(o *loader.Options) {
		lookup := o.Interpolate.LookupValue
		o.Interpolate.LookupValue = func(name string) (string, bool) {
			if !slices.Contains(looked, name) {
				looked = append(looked, name)
			}
			return lookup(name)
		}
	}
	p, err := loader.LoadWithContext(ctx, details, record)
	sort.Strings(looked)
	return p, looked, err
}

// Repo is what Check reads from the repository beside the compose file.
type Repo struct {
	// WorkerFlags are the example worker's flags with their defaults, as
	// its source defines them (ReadRepo).
	WorkerFlags map[string]string
	// MaxAttempts is the consumer's default MaxAttempts, for a worker
	// with no -max-attempts flag.
	MaxAttempts int
}

var (
	flagDef        = regexp.MustCompile(`fs\.(\w+)Var\(&[\w.]+,\s*"([a-z0-9-]+)",\s*([^,]+),`)
	maxAttemptsDef = regexp.MustCompile(`\bmaxAttempts:\s*(\d+),`)
)

// ReadRepo reads, from the Go sources under root, the worker's flags (the
// package that maps flags to ORDER_WORKER_* variables) and the consumer's
// default MaxAttempts (beside func MaxAttempts). It looks the files up by
// what they say, not where they are, so a package that moves is still found.
func ReadRepo(root string) (Repo, error) {
	r := Repo{WorkerFlags: map[string]string{}}
	var workerDir string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == root {
				return nil
			}
			if n := d.Name(); strings.HasPrefix(n, ".") || n == "node_modules" || n == "testdata" {
				return filepath.SkipDir
			}
			// The repository is several modules; only this checker's own is
			// none of the product's.
			if mod, err := os.ReadFile(filepath.Join(path, "go.mod")); err == nil && strings.Contains(string(mod), "/composecheck\n") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if workerDir == "" && strings.Contains(string(src), `"ORDER_WORKER_"`) {
			workerDir = filepath.Dir(path)
		}
		if r.MaxAttempts == 0 && strings.Contains(string(src), "func MaxAttempts(") {
			if m := maxAttemptsDef.FindStringSubmatch(string(src)); m != nil {
				r.MaxAttempts, _ = strconv.Atoi(m[1])
			}
		}
		return nil
	})
	if err != nil {
		return r, err
	}
	if workerDir == "" {
		return r, errors.New(`no Go file maps flags to "ORDER_WORKER_" variables: where is the example worker?`)
	}
	if r.MaxAttempts == 0 {
		return r, errors.New("no Go file defines func MaxAttempts beside a default maxAttempts: N")
	}
	files, err := filepath.Glob(filepath.Join(workerDir, "*.go"))
	if err != nil {
		return r, err
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			return r, err
		}
		for _, m := range flagDef.FindAllStringSubmatch(string(src), -1) {
			r.WorkerFlags[m[2]] = strings.TrimSpace(m[3])
		}
	}
	if len(r.WorkerFlags) == 0 {
		return r, fmt.Errorf("no flags found in %s (fs.XxxVar(&o.field, \"name\", default, ...))", workerDir)
	}
	return r, nil
}

// Check returns every problem it finds in p, one error each.
func Check(p *types.Project, repo Repo) []error {
	c := &checker{p: p, repo: repo}
	c.images()
	c.dependencies()
	w, ok := c.worker()
	if !ok {
		return c.errs
	}
	c.servers(w)
	c.workerEnv(w)
	c.metrics(w)
	c.kafka(w)
	c.sqs(w)
	c.dockerignore(w)
	return c.errs
}

type checker struct {
	p    *types.Project
	repo Repo
	errs []error
}

func (c *checker) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf(format, args...))
}

func (c *checker) names() []string {
	names := c.p.ServiceNames()
	sort.Strings(names)
	return names
}

// images: every image, and every FROM of an inline Dockerfile, names a tag
// other than latest, or a digest.
func (c *checker) images() {
	for _, name := range c.names() {
		s := c.p.Services[name]
		if s.Image != "" {
			c.pinned(name, s.Image)
		}
		if s.Build == nil {
			continue
		}
		df := s.Build.DockerfileInline
		if df == "" {
			path := s.Build.Dockerfile
			if path == "" {
				path = "Dockerfile"
			}
			if !filepath.IsAbs(path) {
				path = filepath.Join(s.Build.Context, path)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				c.fail("service %s: build: %v", name, err)
				continue
			}
			df = string(b)
		}
		stages := []string{"scratch"}
		for _, line := range strings.Split(df, "\n") {
			f := strings.Fields(line)
			if len(f) < 2 || !strings.EqualFold(f[0], "FROM") {
				continue
			}
			f = f[1:]
			for len(f) > 0 && strings.HasPrefix(f[0], "--") {
				f = f[1:]
			}
			if len(f) == 0 {
				continue
			}
			if !slices.Contains(stages, strings.ToLower(f[0])) {
				c.pinned(name+" (build)", f[0])
			}
			if len(f) >= 3 && strings.EqualFold(f[1], "AS") {
				stages = append(stages, strings.ToLower(f[2]))
			}
		}
	}
}

func (c *checker) pinned(where, image string) {
	ref, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		c.fail("service %s: image %q: %v", where, image, err)
		return
	}
	if _, ok := ref.(reference.Digested); ok {
		return
	}
	t, ok := ref.(reference.Tagged)
	switch {
	case !ok:
		c.fail("service %s: image %q has no tag (that is latest): pin a version", where, image)
	case t.Tag() == "latest":
		c.fail("service %s: image %q: pin a version, not latest", where, image)
	}
}

// dependencies: a service waits for what it depends on to be healthy (a
// server, which then needs a healthcheck) or to have completed (a one-shot),
// never merely started.
func (c *checker) dependencies() {
	for _, name := range c.names() {
		s := c.p.Services[name]
		deps := make([]string, 0, len(s.DependsOn))
		for d := range s.DependsOn {
			deps = append(deps, d)
		}
		sort.Strings(deps)
		for _, d := range deps {
			target, ok := c.p.Services[d]
			if !ok {
				c.fail("service %s depends on %s, which is not a service", name, d)
				continue
			}
			switch cond := s.DependsOn[d].Condition; cond {
			case types.ServiceConditionHealthy:
				if !hasHealthcheck(target) {
					c.fail("service %s waits for %s to be healthy, but %s has no healthcheck", name, d, d)
				}
			case types.ServiceConditionCompletedSuccessfully:
				if r := target.Restart; r != "" && r != types.RestartPolicyNo {
					c.fail("service %s waits for %s to complete, but %s restarts (%s)", name, d, d, r)
				}
			default:
				c.fail("service %s depends on %s with condition %q: want %s (or %s for a one-shot), or %s may start before %s serves",
					name, d, cond, types.ServiceConditionHealthy, types.ServiceConditionCompletedSuccessfully, name, d)
			}
		}
	}
}

// servers: every service but the worker and the one-shots it waits for is
// a server, and has a healthcheck.
func (c *checker) servers(w string) {
	for _, name := range c.names() {
		if name == w || c.p.Services[w].DependsOn[name].Condition == types.ServiceConditionCompletedSuccessfully {
			continue
		}
		if !hasHealthcheck(c.p.Services[name]) {
			c.fail("service %s has no healthcheck", name)
		}
	}
}

func hasHealthcheck(s types.ServiceConfig) bool {
	h := s.HealthCheck
	if h == nil || h.Disable || len(h.Test) == 0 {
		return false
	}
	switch h.Test[0] {
	case "CMD", "CMD-SHELL":
		return len(h.Test) > 1 && strings.TrimSpace(strings.Join(h.Test[1:], " ")) != ""
	}
	return false
}

// worker finds the service that runs the example worker: the one that sets
// ORDER_WORKER_SOURCE.
func (c *checker) worker() (string, bool) {
	for _, name := range c.names() {
		if _, ok := c.p.Services[name].Environment["ORDER_WORKER_SOURCE"]; ok {
			return name, true
		}
	}
	c.fail("no service sets ORDER_WORKER_SOURCE: the example worker's service is missing")
	return "", false
}

func (c *checker) env(service, key string) (string, bool) {
	v, ok := c.p.Services[service].Environment[key]
	if !ok || v == nil {
		return "", false
	}
	return *v, true
}

// flag is the worker's setting for flag name: its ORDER_WORKER_* variable
// if set, else the flag's default (a quoted default unquoted).
func (c *checker) flag(worker, name string) string {
	if v, ok := c.env(worker, envName(name)); ok {
		return v
	}
	d := c.repo.WorkerFlags[name]
	if u, err := strconv.Unquote(d); err == nil {
		return u
	}
	return d
}

// envName is the worker's mapping of a flag to its variable (main.go's envName).
func envName(flag string) string {
	return "ORDER_WORKER_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// workerEnv: each ORDER_WORKER_* variable is one of the worker's flags, and
// each server the worker reaches is a service it waits for, healthy.
func (c *checker) workerEnv(w string) {
	s := c.p.Services[w]
	keys := make([]string, 0, len(s.Environment))
	for k := range s.Environment {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		rest, ok := strings.CutPrefix(k, "ORDER_WORKER_")
		if !ok {
			continue
		}
		flag := strings.ToLower(strings.ReplaceAll(rest, "_", "-"))
		if _, ok := c.repo.WorkerFlags[flag]; !ok {
			c.fail("service %s: %s is no flag of the worker (it has no -%s)", w, k, flag)
		}
	}
	switch src := c.flag(w, "source"); src {
	case "sqs", "kafka", "franz":
	default:
		c.fail("service %s: source %q: want sqs, kafka or franz", w, src)
	}

	type use struct{ variable, host string }
	var uses []use
	for _, k := range keys {
		v, _ := c.env(w, k)
		if strings.HasPrefix(k, "AWS_ENDPOINT_URL") || k == envName("sqs-queue-url") || k == envName("sqs-dlq-url") {
			u, err := url.Parse(v)
			if err != nil || u.Hostname() == "" {
				c.fail("service %s: %s=%q is not a URL", w, k, v)
				continue
			}
			uses = append(uses, use{k, u.Hostname()})
		}
	}
	for _, b := range strings.Split(c.flag(w, "kafka-brokers"), ",") {
		if host, _, err := net.SplitHostPort(strings.TrimSpace(b)); err == nil {
			uses = append(uses, use{envName("kafka-brokers"), host})
		} else {
			c.fail("service %s: Kafka broker %q: %v", w, b, err)
		}
	}
	for _, u := range uses {
		if _, ok := c.p.Services[u.host]; !ok {
			c.fail("service %s: %s names host %q, which is no service (inside a container, localhost is the container itself)", w, u.variable, u.host)
			continue
		}
		if s.DependsOn[u.host].Condition != types.ServiceConditionHealthy {
			c.fail("service %s uses %s (%s) but does not wait for it to be healthy", w, u.host, u.variable)
		}
	}
	if v, _ := c.env(w, envName("create-tables")); v == "true" {
		ep, ok := c.env(w, "AWS_ENDPOINT_URL_DYNAMODB")
		if !ok {
			c.fail("service %s creates tables but sets no AWS_ENDPOINT_URL_DYNAMODB", w)
		} else if u, err := url.Parse(ep); err == nil && s.DependsOn[u.Hostname()].Condition != types.ServiceConditionHealthy {
			c.fail("service %s creates tables at start but does not wait for %s to be healthy", w, u.Hostname())
		}
	}
}

// metrics: the worker's metrics port is published.
func (c *checker) metrics(w string) {
	addr := c.flag(w, "metrics-addr")
	if addr == "" {
		c.fail("service %s: metrics are off (-metrics-addr empty)", w)
		return
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		c.fail("service %s: metrics address %q: %v", w, addr, err)
		return
	}
	if !c.published(w, port, "") {
		c.fail("service %s: metrics port %s is not published", w, port)
	}
}

// published reports whether service publishes container port target (on
// host port want, when want is not empty).
func (c *checker) published(service, target, want string) bool {
	for _, p := range c.p.Services[service].Ports {
		if strconv.FormatUint(uint64(p.Target), 10) == target && p.Published != "" && (want == "" || p.Published == want) {
			return true
		}
	}
	return false
}

type listener struct{ name, host, port string }

func parseListeners(s string) ([]listener, error) {
	var out []listener
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		name, addr, ok := strings.Cut(item, "://")
		if !ok {
			return nil, fmt.Errorf("%q: want NAME://host:port", item)
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("%q: %v", item, err)
		}
		out = append(out, listener{name, host, port})
	}
	return out, nil
}

// kafka: the broker the worker uses advertises a listener for the
// containers and one for the host, both bound and mapped to a protocol,
// the host's published on the advertised port; on the Kafka route the
// topics exist before the worker starts.
func (c *checker) kafka(w string) {
	brokers := c.flag(w, "kafka-brokers")
	host, port, err := net.SplitHostPort(strings.TrimSpace(strings.Split(brokers, ",")[0]))
	if err != nil {
		return // reported by workerEnv
	}
	if _, ok := c.p.Services[host]; !ok {
		return // reported by workerEnv
	}
	get := func(k string) string { v, _ := c.env(host, k); return v }
	adv, err := parseListeners(get("KAFKA_ADVERTISED_LISTENERS"))
	if err != nil {
		c.fail("service %s: KAFKA_ADVERTISED_LISTENERS: %v", host, err)
		return
	}
	bound, err := parseListeners(get("KAFKA_LISTENERS"))
	if err != nil {
		c.fail("service %s: KAFKA_LISTENERS: %v", host, err)
		return
	}
	protocols := map[string]bool{}
	for _, m := range strings.Split(get("KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"), ",") {
		if name, _, ok := strings.Cut(strings.TrimSpace(m), ":"); ok {
			protocols[name] = true
		}
	}
	var inNetwork, forHost bool
	for _, a := range adv {
		if !protocols[a.name] {
			c.fail("service %s: listener %s is not in KAFKA_LISTENER_SECURITY_PROTOCOL_MAP", host, a.name)
		}
		i := slices.IndexFunc(bound, func(b listener) bool { return b.name == a.name })
		if i < 0 {
			c.fail("service %s: advertised listener %s is not in KAFKA_LISTENERS", host, a.name)
			continue
		}
		switch a.host {
		case host:
			inNetwork = inNetwork || (a.port == port && bound[i].port == port)
		case "localhost", "127.0.0.1", "::1":
			forHost = true
			if !c.published(host, bound[i].port, a.port) {
				c.fail("service %s: the host listener %s advertises %s:%s, but container port %s is not published as %s",
					host, a.name, a.host, a.port, bound[i].port, a.port)
			}
		}
	}
	if !inNetwork {
		c.fail("service %s: no listener advertises %s:%s, the worker's broker", host, host, port)
	}
	if !forHost {
		c.fail("service %s: no listener advertised for the host (localhost or 127.0.0.1): clients on the host cannot connect", host)
	}

	topics := []string{c.flag(w, "kafka-topic")}
	dlq := c.flag(w, "kafka-dlq-topic")
	if dlq == "" {
		dlq = topics[0] + "-dlq"
	}
	topics = append(topics, dlq)
	var cmds []string
	for d, dep := range c.p.Services[w].DependsOn {
		if dep.Condition == types.ServiceConditionCompletedSuccessfully {
			s := c.p.Services[d]
			cmds = append(cmds, strings.Join(append(slices.Clone(s.Entrypoint), s.Command...), " "))
		}
	}
	for _, t := range topics {
		create := regexp.MustCompile(`kafka-topics(\.sh)?\s[^&;|]*--create[^&;|]*--topic[ =]` + regexp.QuoteMeta(t) + `(\s|$)`)
		if !slices.ContainsFunc(cmds, create.MatchString) {
			c.fail("service %s: no one-shot it waits for (%s) creates the Kafka topic %s", w, types.ServiceConditionCompletedSuccessfully, t)
		}
	}
}

// sqs: the queue the worker reads is created at start by the emulator's
// mounted config, with a dead-letter queue and a maxReceiveCount that meets
// the bound `onceq check` warns under, and queue URLs the worker can reach.
func (c *checker) sqs(w string) {
	raw, ok := c.env(w, envName("sqs-queue-url"))
	if !ok {
		c.fail("service %s: no %s", w, envName("sqs-queue-url"))
		return
	}
	u, err := url.Parse(raw)
	if err != nil {
		return // reported by workerEnv
	}
	svc, ok := c.p.Services[u.Hostname()]
	if !ok {
		return // reported by workerEnv
	}
	queue := raw[strings.LastIndex(raw, "/")+1:]
	var conf string
	for _, ref := range svc.Configs {
		if ref.Target != "/opt/elasticmq.conf" {
			continue
		}
		cfg, ok := c.p.Configs[ref.Source]
		if !ok {
			continue
		}
		conf = cfg.Content
		if conf == "" && cfg.File != "" {
			b, err := os.ReadFile(cfg.File)
			if err != nil {
				c.fail("config %s: %v", ref.Source, err)
				return
			}
			conf = string(b)
		}
	}
	if conf == "" {
		c.fail("service %s: no ElasticMQ config mounted at /opt/elasticmq.conf: the queue %s and its dead-letter queue are not created at start", svc.Name, queue)
		return
	}
	tree, err := parseHOCON(conf)
	if err != nil {
		c.fail("service %s: ElasticMQ config: %v", svc.Name, err)
		return
	}
	if h := tree.str("node-address", "host"); h != "*" && h != svc.Name {
		c.fail("service %s: ElasticMQ node-address.host %q: want \"*\" (or %q), or the queue URLs it returns (the dead-letter queue's too) point where the worker cannot reach", svc.Name, h, svc.Name)
	}
	q := tree.obj("queues", queue)
	if q == nil {
		c.fail("service %s: ElasticMQ config creates no queue %s", svc.Name, queue)
		return
	}
	dlq := tree.str("queues", queue, "deadLettersQueue", "name")
	if dlq == "" {
		c.fail("service %s: queue %s has no deadLettersQueue (redrive policy): the worker refuses a queue without one", svc.Name, queue)
		return
	}
	if tree.obj("queues", dlq) == nil {
		c.fail("service %s: the dead-letter queue %s is not created", svc.Name, dlq)
	}
	maxReceive, err := strconv.Atoi(tree.str("queues", queue, "deadLettersQueue", "maxReceiveCount"))
	if err != nil || maxReceive < 1 || maxReceive > 1000 {
		c.fail("service %s: queue %s: maxReceiveCount %q: want 1 to 1000", svc.Name, queue, tree.str("queues", queue, "deadLettersQueue", "maxReceiveCount"))
		return
	}
	vis, err := parseDuration(tree.str("queues", queue, "defaultVisibilityTimeout"))
	if err != nil || vis <= 0 {
		c.fail("service %s: queue %s: defaultVisibilityTimeout %q: set it (the redrive bound depends on it)", svc.Name, queue, tree.str("queues", queue, "defaultVisibilityTimeout"))
		return
	}
	lease, err := time.ParseDuration(c.flag(w, "lease-ttl"))
	if err != nil {
		lease, err = goDuration(c.repo.WorkerFlags["lease-ttl"])
	}
	if err != nil || lease <= 0 {
		c.fail("service %s: cannot read the worker's lease TTL (%q): %v", w, c.repo.WorkerFlags["lease-ttl"], err)
		return
	}
	attempts := c.repo.MaxAttempts
	if _, ok := c.repo.WorkerFlags["max-attempts"]; ok {
		if n, err := strconv.Atoi(c.flag(w, "max-attempts")); err == nil {
			attempts = n
		}
	}
	// As cmd/onceq's receivesNeeded.
	need := attempts + 2*int((lease+vis-1)/vis)
	if maxReceive < need {
		c.fail("service %s: queue %s: maxReceiveCount %d is below %d = MaxAttempts %d + 2 × ceil(LeaseTTL %v / VisibilityTimeout %v): SQS could dead-letter a message before the worker has spent its attempts",
			svc.Name, queue, maxReceive, need, attempts, lease, vis)
	}
}

// dockerignore: a service built from the repository has a .dockerignore
// that keeps .git, .bin and node_modules out of the build context.
func (c *checker) dockerignore(w string) {
	b := c.p.Services[w].Build
	if b == nil {
		return
	}
	data, err := os.ReadFile(filepath.Join(b.Context, ".dockerignore"))
	if err != nil {
		c.fail("service %s: build context %s has no .dockerignore: `COPY . .` would ship .git, .bin and node_modules", w, b.Context)
		return
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(string(data), "\n") {
		lines[strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(l), "/"), "/")] = true
	}
	for _, want := range []string{".git", ".bin", "**/node_modules"} {
		if !lines[want] {
			c.fail(".dockerignore does not exclude %s", want)
		}
	}
}

// goDuration reads a Go duration expression as a flag default is written:
// 60*time.Second, 2 * time.Minute, time.Minute.
func goDuration(expr string) (time.Duration, error) {
	m := regexp.MustCompile(`^(?:(\d+)\s*\*\s*)?time\.(Millisecond|Second|Minute|Hour)$`).FindStringSubmatch(strings.TrimSpace(expr))
	if m == nil {
		return 0, fmt.Errorf("%q is not N*time.Unit", expr)
	}
	n := 1
	if m[1] != "" {
		n, _ = strconv.Atoi(m[1])
	}
	unit := map[string]time.Duration{"Millisecond": time.Millisecond, "Second": time.Second, "Minute": time.Minute, "Hour": time.Hour}[m[2]]
	return time.Duration(n) * unit, nil
}

// parseDuration reads a HOCON duration: "30 seconds", "30s", "1 minute".
func parseDuration(s string) (time.Duration, error) {
	m := regexp.MustCompile(`^(\d+)\s*([a-z]+)$`).FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("%q: want N unit", s)
	}
	n, _ := strconv.Atoi(m[1])
	units := map[string]time.Duration{
		"ms": time.Millisecond, "millis": time.Millisecond, "milliseconds": time.Millisecond,
		"s": time.Second, "second": time.Second, "seconds": time.Second,
		"m": time.Minute, "minute": time.Minute, "minutes": time.Minute,
		"h": time.Hour, "hour": time.Hour, "hours": time.Hour,
	}
	u, ok := units[m[2]]
	if !ok {
		return 0, fmt.Errorf("%q: unknown unit", s)
	}
	return time.Duration(n) * u, nil
}

// hocon is the part of HOCON an ElasticMQ config uses: nested objects
// (`name { ... }`), `key = value` pairs, comments and includes.
type hocon map[string]any

func parseHOCON(s string) (hocon, error) {
	root := hocon{}
	stack := []hocon{root}
	for n, line := range strings.Split(s, "\n") {
		if i := strings.Index(line, "//"); i >= 0 && !strings.Contains(line[:i], `"`) {
			line = line[:i]
		}
		if i := strings.Index(line, "#"); i >= 0 && !strings.Contains(line[:i], `"`) {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		cur := stack[len(stack)-1]
		switch {
		case line == "" || strings.HasPrefix(line, "include "):
		case line == "}":
			if len(stack) == 1 {
				return nil, fmt.Errorf("line %d: unbalanced }", n+1)
			}
			stack = stack[:len(stack)-1]
		case strings.HasSuffix(line, "{"):
			key := unquote(strings.TrimSpace(strings.TrimSuffix(line, "{")))
			child, _ := cur[key].(hocon)
			if child == nil {
				child = hocon{}
				cur[key] = child
			}
			stack = append(stack, child)
		case strings.HasSuffix(line, "{ }") || strings.HasSuffix(line, "{}"):
			key := unquote(strings.TrimSpace(strings.TrimSuffix(strings.TrimSuffix(line, "{ }"), "{}")))
			if _, ok := cur[key].(hocon); !ok {
				cur[key] = hocon{}
			}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				k, v, ok = strings.Cut(line, ":")
			}
			if !ok {
				return nil, fmt.Errorf("line %d: %q: want key = value", n+1, line)
			}
			cur[unquote(strings.TrimSpace(k))] = unquote(strings.TrimSpace(v))
		}
	}
	if len(stack) != 1 {
		return nil, errors.New("unbalanced {")
	}
	return root, nil
}

func unquote(s string) string {
	if u, err := strconv.Unquote(s); err == nil {
		return u
	}
	return s
}

func (h hocon) obj(path ...string) hocon {
	cur := h
	for _, p := range path {
		next, ok := cur[p].(hocon)
		if !ok {
			return nil
		}
		cur = next
	}
	return cur
}

func (h hocon) str(path ...string) string {
	o := h.obj(path[:len(path)-1]...)
	if o == nil {
		return ""
	}
	s, _ := o[path[len(path)-1]].(string)
	return s
}
