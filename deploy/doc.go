// Package deploy holds kvcanary's deployment recipe — Prometheus alerting
// rules and their promtool tests, a Grafana dashboard, a systemd unit for
// the collector and a Kubernetes DaemonSet for GPU nodes — and the test
// that checks the fields the recipe relies on without a cluster. It has no
// code.
package deploy
