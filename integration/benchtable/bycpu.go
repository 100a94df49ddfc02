package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// scalingFigures are the figures of the per-core table, in its order: the
// throughputs (each also over its 1-core figure) and their CPU costs.
var scalingFigures = []struct{ bench, unit, label string }{
	{mem, "msgs/s", "memory pipeline, 16 workers: msgs/s"},
	{mem, "cpu-us/msg", "memory pipeline: CPU µs/msg"},
	{ctlH, "msgs/s", "control, the pipeline's shape without onceq (channel hand-off to 16 workers): msgs/s"},
	{ctlP, "msgs/s", "control, the same work on every core, no hand-off: msgs/s"},
	{dup, "msgs/s", "cached duplicates: msgs/s"},
	{kafka, "onceq_msgs/s", "Kafka (kafka-go): onceq msgs/s"},
	{kafka, "raw_msgs/s", "Kafka (kafka-go): raw msgs/s"},
	{kafka, "ratio", "Kafka (kafka-go): onceq ÷ raw"},
	{franz, "onceq_msgs/s", "Kafka (franz-go): onceq msgs/s"},
	{franz, "raw_msgs/s", "Kafka (franz-go): raw msgs/s"},
	{franz, "ratio", "Kafka (franz-go): onceq ÷ raw"},
}

// runByCPU prints a table of a -cpu run: one column per core count, and
// for a throughput a row of its scaling over the 1-core figure.
func runByCPU(out io.Writer, inputs []string) error {
	res, err := readAll(inputs, ParseByCPU)
	if err != nil {
		return err
	}
	_, err = io.WriteString(out, RenderByCPU(res))
	return err
}

// RenderByCPU renders the per-core table of res (from ParseByCPU).
func RenderByCPU(res *Results) string {
	var cpus []int
	for name := range res.Values {
		if _, n, ok := strings.Cut(name, "@"); ok {
			if c, err := strconv.Atoi(n); err == nil && !slices.Contains(cpus, c) {
				cpus = append(cpus, c)
			}
		}
	}
	slices.Sort(cpus)
	var b strings.Builder
	b.WriteString("| measure |")
	for _, c := range cpus {
		fmt.Fprintf(&b, " %d |", c)
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(cpus)) + "\n")
	for _, f := range scalingFigures {
		cells, base, any := make([]string, len(cpus)), 0.0, false
		scaled := make([]string, len(cpus))
		for i, c := range cpus {
			v, _, ok := res.Median(f.bench+"@"+strconv.Itoa(c), f.unit)
			if !ok {
				continue
			}
			any = true
			cells[i] = format(v)
			if c == 1 {
				base = v
			}
			if base > 0 {
				scaled[i] = format(v/base) + "×"
			}
		}
		if !any {
			continue
		}
		fmt.Fprintf(&b, "| %s | %s |\n", f.label, strings.Join(cells, " | "))
		if strings.HasSuffix(f.unit, "msgs/s") && base > 0 {
			fmt.Fprintf(&b, "| … over its 1-core figure | %s |\n", strings.Join(scaled, " | "))
		}
	}
	return b.String()
}
