package main

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Results holds every value a `go test -bench` output reported, by
// benchmark name (without the -GOMAXPROCS suffix) and unit, one value per
// run in the order printed. ParseByCPU keeps the GOMAXPROCS apart instead.
type Results struct {
	Values map[string]map[string][]float64
	// CPU is the "cpu:" line go test prints, if any.
	CPU string
}

// procSuffix is the "-2" go test appends to a benchmark's name when
// GOMAXPROCS is not 1.
var procSuffix = regexp.MustCompile(`-\d+$`)

// Parse reads benchmark output. Lines other than results (PASS, ok, logs)
// are skipped; a result line whose values do not parse is an error, so a
// changed format is noticed rather than read as missing figures.
func Parse(r io.Reader) (*Results, error) { return parse(r, false) }

// ParseByCPU reads the output of a `go test -cpu 1,2,…` run: each value
// is kept under the name with "@" and its GOMAXPROCS appended
// (BenchmarkX@1, BenchmarkX@2), so that the runs can be compared.
func ParseByCPU(r io.Reader) (*Results, error) { return parse(r, true) }

func parse(r io.Reader, byCPU bool) (*Results, error) {
	res := &Results{Values: map[string]map[string][]float64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	line := 0
	// go test prints a benchmark's name before running it; output the
	// benchmark writes meanwhile (logs) then splits the name from its
	// figures, which come on a later line of their own.
	pending := ""
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if cpu, ok := strings.CutPrefix(text, "cpu: "); ok {
			res.CPU = cpu
			continue
		}
		f := strings.Fields(text)
		if len(f) >= 1 && strings.HasPrefix(f[0], "Benchmark") && (len(f) == 1 || !isCount(f[1])) {
			pending = f[0]
			continue
		}
		if len(f) >= 3 && len(f)%2 == 1 && pending != "" && isCount(f[0]) {
			f = append([]string{pending}, f...) // the figures of the name printed earlier
		}
		// A result line is the name, the iteration count, then value-unit
		// pairs.
		if len(f) < 4 || len(f)%2 != 0 || !strings.HasPrefix(f[0], "Benchmark") || !isCount(f[1]) {
			continue
		}
		pending = ""
		name := procSuffix.ReplaceAllString(f[0], "")
		if byCPU {
			procs := strings.TrimPrefix(procSuffix.FindString(f[0]), "-")
			if procs == "" {
				procs = "1" // go test names a GOMAXPROCS=1 run without a suffix
			}
			name += "@" + procs
		}
		m := res.Values[name]
		if m == nil {
			m = map[string][]float64{}
			res.Values[name] = m
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, &ParseError{Line: line, Text: text, Err: err}
			}
			m[f[i+1]] = append(m[f[i+1]], v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return res, nil
}

func isCount(s string) bool {
	_, err := strconv.ParseInt(s, 10, 64)
	return err == nil
}

// ParseError is a result line whose values are not numbers.
type ParseError struct {
	Line int
	Text string
	Err  error
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("line %d: %q: %v", e.Line, e.Text, e.Err)
}

func (e *ParseError) Unwrap() error { return e.Err }

// Median is the median of the runs of a benchmark's unit, and how many
// runs there were; ok is false if there were none.
func (r *Results) Median(name, unit string) (v float64, runs int, ok bool) {
	vs := r.Values[name][unit]
	if len(vs) == 0 {
		return 0, 0, false
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2], n, true
	}
	return (s[n/2-1] + s[n/2]) / 2, n, true
}
