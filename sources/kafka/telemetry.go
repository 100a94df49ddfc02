package kafka

import "go.opentelemetry.io/otel/metric"

const instrumentationName = "github.com/onceq/onceq/sources/kafka"

// lags yields every dispatching partition's commit lag, under the source's
// lock for a consistent view; it runs on the metric reader's collection.
func (s *Source) lags(yield func(lag int64, set metric.ObserveOption)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.parts {
		if lag, ok := p.tr.Lag(p.hwm); ok {
			yield(lag, p.lagSet)
		}
	}
}
