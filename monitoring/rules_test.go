package monitoring

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// promtool finds Prometheus's rule checker: $ONCEQ_PROMTOOL (which
// integration/servers.sh writes), else promtool on PATH. In CI a missing
// promtool is a failure, never a skip.
func promtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("ONCEQ_PROMTOOL"); p != "" {
		return p
	}
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("promtool not found: set ONCEQ_PROMTOOL or install Prometheus (Debian: prometheus); integration/servers.sh start installs it")
	}
	t.Skip("promtool not found (install Prometheus, or run integration/servers.sh start)")
	return ""
}

func runPromtool(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// The alert rules load, and every test case in onceq-alerts.test.yml
// passes: each alert fires on its firing series, with the labels and
// annotations expected, and stays silent on its silent series.
func TestAlertRules(t *testing.T) {
	runPromtool(t, ".", "check", "rules", "onceq-alerts.yml")
	runPromtool(t, ".", "test", "rules", "onceq-alerts.test.yml")
}

type ruleFile struct {
	Groups []struct {
		Rules []struct {
			Alert string `yaml:"alert"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

type ruleTests struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		AlertRuleTest []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

func readYAML(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// promtool passes a rules file whose alerts have no test at all; this
// test does not: every alert needs a case where it fires and one where it
// stays silent.
func TestEveryAlertFiresAndStaysSilent(t *testing.T) {
	var rules ruleFile
	readYAML(t, "onceq-alerts.yml", &rules)
	var tests ruleTests
	readYAML(t, "onceq-alerts.test.yml", &tests)
	if len(tests.RuleFiles) != 1 || tests.RuleFiles[0] != "onceq-alerts.yml" {
		t.Fatalf("onceq-alerts.test.yml tests %v, want onceq-alerts.yml", tests.RuleFiles)
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if !fires[r.Alert] {
				t.Errorf("alert %s has no test case in which it fires", r.Alert)
			}
			if !silent[r.Alert] {
				t.Errorf("alert %s has no test case in which it stays silent", r.Alert)
			}
		}
	}
	if n == 0 {
		t.Fatal("onceq-alerts.yml has no alert")
	}
}

type dashboard struct {
	Title  string `json:"title"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// Every dashboard query is valid PromQL: each is loaded by promtool as a
// recording rule, with Grafana's variables given values.
func TestDashboardQueriesParse(t *testing.T) {
	b, err := os.ReadFile("onceq-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("onceq-dashboard.json: %v", err)
	}
	vars := strings.NewReplacer("$__rate_interval", "5m", "$destination", ".*", "${datasource}", "prometheus")
	type record struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var recs []record
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			recs = append(recs, record{Record: "onceq:dashboard_query", Expr: vars.Replace(q.Expr)})
		}
	}
	if len(recs) == 0 {
		t.Fatal("the dashboard has no query")
	}
	out, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": recs}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboard-rules.yml"), out, 0o600); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, dir, "check", "rules", "dashboard-rules.yml")
}
