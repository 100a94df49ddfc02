// Package monitoring holds no code: its directory carries onceq's Grafana
// dashboard (onceq-dashboard.json) and Prometheus alert rules
// (onceq-alerts.yml, tested by onceq-alerts.test.yml), and its tests check
// them with promtool and against the metrics onceq's code registers.
package monitoring
