package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Fig names one reported figure: a benchmark and the unit of its metric.
type Fig struct{ Bench, Unit string }

func (f Fig) set() bool { return f.Bench != "" }

// Target is a goal a figure is judged against.
type Target struct {
	Text string
	Met  func(v float64) bool
}

// AtLeast is met by v ≥ x.
func AtLeast(x float64) Target {
	return Target{"≥ " + format(x), func(v float64) bool { return v >= x }}
}

// AtMost is met by v ≤ x.
func AtMost(x float64) Target {
	return Target{"≤ " + format(x), func(v float64) bool { return v <= x }}
}

// Equal is met by v within 0.05 of x (a count per message).
func Equal(x float64) Target {
	return Target{"= " + format(x), func(v float64) bool { return math.Abs(v-x) <= 0.05 }}
}

// Within is met by a ratio within ±frac of 1.
func Within(frac float64) Target {
	return Target{fmt.Sprintf("1 ± %g", frac), func(v float64) bool { return math.Abs(v-1) <= frac }}
}

// Row is one line of the table: onceq's figure beside its raw baseline.
// The target judges the ratio when the row has one, else onceq's figure.
type Row struct {
	Label      string
	Onceq, Raw Fig
	// Ratio is a ratio the benchmark reported itself, from the same run
	// as both figures; without it, a row with both figures shows the
	// ratio of their medians.
	Ratio Fig
	// NoRatio shows two figures side by side without a ratio; the target
	// then judges onceq's figure.
	NoRatio bool
	Target  Target
}

// Render prints the rows as a Markdown table of medians.
func Render(r *Results, rows []Row) string {
	var b strings.Builder
	b.WriteString("| measure | onceq | raw baseline | ratio | target | result |\n")
	b.WriteString("|---|---:|---:|---:|---|---|\n")
	for _, row := range rows {
		cell := func(f Fig) (string, float64, bool) {
			if !f.set() {
				return "", 0, false
			}
			v, _, ok := r.Median(f.Bench, f.Unit)
			if !ok {
				return "not run", 0, false
			}
			return format(v), v, true
		}
		on, onV, onOK := cell(row.Onceq)
		raw, rawV, rawOK := cell(row.Raw)
		ratio, ratioV, ratioOK := cell(row.Ratio)
		if !row.Ratio.set() && !row.NoRatio && onOK && rawOK && rawV != 0 {
			ratioV, ratioOK = onV/rawV, true
			ratio = format(ratioV)
		}
		judged, judgedOK := onV, onOK
		if row.Ratio.set() || (!row.NoRatio && row.Onceq.set() && row.Raw.set()) {
			judged, judgedOK = ratioV, ratioOK
		}
		result := "not run"
		switch {
		case row.Target.Met == nil:
			result = ""
		case judgedOK && row.Target.Met(judged):
			result = "met"
		case judgedOK:
			result = "missed"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", row.Label, on, raw, ratio, row.Target.Text, result)
	}
	return b.String()
}

// format prints a figure with about three significant digits, whole
// numbers from 100 up, without trailing zeros.
func format(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return strconv.FormatFloat(math.Round(v), 'f', 0, 64)
	case a >= 10:
		return trim(strconv.FormatFloat(v, 'f', 1, 64))
	default:
		return trim(strconv.FormatFloat(v, 'f', 2, 64))
	}
}

// trim drops a fraction's trailing zeros: 9.00 → 9, 0.80 → 0.8.
func trim(s string) string {
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}
