// Package proccpu reads the CPU time this process has used, for benchmarks
// that report CPU per message: a figure a loaded machine disturbs less
// than wall-clock throughput.
package proccpu

import "time"

// Used is the user and system CPU time the process has used so far; zero
// where the operating system does not tell (outside Unix).
func Used() time.Duration { return used() }

// PerOp is the CPU time used since start, in microseconds per op.
func PerOp(start time.Duration, ops int) float64 {
	if ops <= 0 {
		return 0
	}
	return float64(Used()-start) / float64(time.Microsecond) / float64(ops)
}
