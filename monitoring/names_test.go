package monitoring

import (
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// instrument is one OTel instrument onceq's code creates.
type instrument struct {
	name, unit, kind, at string
}

// constructors are the OTel meter methods onceq creates instruments with.
var constructors = map[string]bool{
	"Int64Counter": true, "Float64Counter": true,
	"Int64UpDownCounter": true, "Float64UpDownCounter": true,
	"Int64Histogram": true, "Float64Histogram": true,
	"Int64Gauge": true, "Float64Gauge": true,
	"Int64ObservableCounter": true, "Float64ObservableCounter": true,
	"Int64ObservableGauge": true, "Float64ObservableGauge": true,
	"Int64ObservableUpDownCounter": true, "Float64ObservableUpDownCounter": true,
}

// registered reads every non-test Go file of the repository and returns the
// instruments whose name is a string literal, or a string constant declared
// in the repository: the metrics an onceq process can export.
func registered(t *testing.T) []instrument {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "node_modules" || n == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files = append(files, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	consts := stringConsts(files)
	var out []instrument
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || !constructors[sel.Sel.Name] {
				return true
			}
			name, ok := literal(call.Args[0])
			if !ok {
				name, ok = consts[identName(call.Args[0])]
			}
			if !ok {
				return true
			}
			in := instrument{name: name, kind: sel.Sel.Name, at: fset.Position(call.Pos()).String()}
			for _, a := range call.Args[1:] {
				if c, ok := a.(*ast.CallExpr); ok {
					if s, ok := c.Fun.(*ast.SelectorExpr); ok && s.Sel.Name == "WithUnit" && len(c.Args) == 1 {
						in.unit, _ = literal(c.Args[0])
					}
				}
			}
			out = append(out, in)
			return true
		})
	}
	if len(out) < 10 {
		t.Fatalf("found %d onceq instruments in %s; the scan is broken", len(out), root)
	}
	return out
}

// stringConsts maps the name of every string constant the files declare
// to its value.
func stringConsts(files []*ast.File) map[string]string {
	out := make(map[string]string)
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						if v, ok := literal(vs.Values[i]); ok {
							out[n.Name] = v
						}
					}
				}
			}
		}
	}
	return out
}

// identName is the name an identifier or a package-qualified identifier
// refers to ("" for any other expression).
func identName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return e.Sel.Name
	}
	return ""
}

func literal(e ast.Expr) (string, bool) {
	b, ok := e.(*ast.BasicLit)
	if !ok || b.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(b.Value)
	return s, err == nil
}

// exported creates each instrument on an SDK meter provider read by
// OpenTelemetry's Prometheus exporter, records one value on each, and
// returns the metric family names a Prometheus server scrapes: the exporter
// adds unit suffixes and _total to counters, so the names are taken from it
// rather than worked out here.
func exported(t *testing.T, ins []instrument) map[string]string {
	t.Helper()
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	m := mp.Meter("github.com/onceq/onceq")
	ctx := context.Background()
	for _, in := range ins {
		// The kind decides the Prometheus type and suffix; Int64 or Float64,
		// synchronous or observable, do not.
		unit := metric.WithUnit(in.unit)
		var err error
		switch k := in.kind; {
		case strings.Contains(k, "Histogram"):
			var h metric.Float64Histogram
			if h, err = m.Float64Histogram(in.name, unit); err == nil {
				h.Record(ctx, 1)
			}
		case strings.Contains(k, "Gauge"):
			var g metric.Float64Gauge
			if g, err = m.Float64Gauge(in.name, unit); err == nil {
				g.Record(ctx, 1)
			}
		case strings.Contains(k, "UpDownCounter"):
			var c metric.Float64UpDownCounter
			if c, err = m.Float64UpDownCounter(in.name, unit); err == nil {
				c.Add(ctx, 1)
			}
		default:
			var c metric.Float64Counter
			if c, err = m.Float64Counter(in.name, unit); err == nil {
				c.Add(ctx, 1)
			}
		}
		if err != nil {
			t.Fatalf("%s: %s: %v", in.at, in.name, err)
		}
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := make(map[string]string)
	for _, f := range families {
		names[f.GetName()] = f.GetType().String()
	}
	return names
}

var (
	promName = regexp.MustCompile(`\bonceq_[a-z0-9_]+`)
	// Label names in a query: inside a selector's braces, or grouped by.
	matchers = regexp.MustCompile(`\{[^}]*\}`)
	grouping = regexp.MustCompile(`\b(by|without)\s*\([^)]*\)`)
)

// metricsIn returns the onceq metric names a PromQL query reads, label
// names left out.
func metricsIn(expr string, into map[string]bool) {
	expr = grouping.ReplaceAllString(matchers.ReplaceAllString(expr, ""), "")
	for _, n := range promName.FindAllString(expr, -1) {
		into[n] = true
	}
}

// queries returns the PromQL of a rules file (its exprs) or a Grafana
// dashboard (its panels' targets).
func queries(t *testing.T, file string) []string {
	t.Helper()
	var out []string
	if strings.HasSuffix(file, ".json") {
		var d dashboard
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for _, p := range d.Panels {
			for _, q := range p.Targets {
				out = append(out, q.Expr)
			}
		}
		return out
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Expr string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	readYAML(t, file, &rules)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			out = append(out, r.Expr)
		}
	}
	return out
}

// TestEveryNamedMetricIsRegistered: a metric renamed in the code must be
// renamed in the dashboard and the alert rules too, or a panel goes blank
// and an alert never fires without anyone noticing.
func TestEveryNamedMetricIsRegistered(t *testing.T) {
	names := exported(t, registered(t))
	known := func(n string) bool {
		if _, ok := names[n]; ok {
			return true
		}
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(n, s); ok {
				if typ := names[base]; typ == "HISTOGRAM" {
					return true
				}
			}
		}
		return false
	}
	for _, file := range []string{"onceq-alerts.yml", "onceq-dashboard.json"} {
		used := map[string]bool{}
		for _, q := range queries(t, file) {
			metricsIn(q, used)
		}
		if len(used) == 0 {
			t.Errorf("%s names no onceq metric", file)
		}
		var unknown []string
		for n := range used {
			if !known(n) {
				unknown = append(unknown, n)
			}
		}
		sort.Strings(unknown)
		if len(unknown) > 0 {
			var have []string
			for n := range names {
				have = append(have, n)
			}
			sort.Strings(have)
			t.Errorf("%s names metrics no onceq code registers: %v\nregistered (as Prometheus scrapes them): %v", file, unknown, have)
		}
	}
}
