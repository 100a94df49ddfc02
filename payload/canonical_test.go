package payload

import (
	"testing"

	"github.com/tidwall/gjson"
)

func canonical(s string) string { return string(appendCanonical(nil, gjson.Parse(s))) }

func TestCanonicalNumbers(t *testing.T) {
	cases := map[string]string{
		"0": "0", "-0": "0", "0.000": "0", "0e9": "0", "-0.0e-3": "0",
		"1": "1", "1.0": "1", "1.00": "1", "1e0": "1", "10e-1": "1", "0.1e1": "1",
		"100": "100", "1e2": "100", "1E+2": "100", "1e02": "100",
		"1.5": "1.5", "1.50": "1.5", "15e-1": "1.5", "-1.5": "-1.5",
		"0.05": "0.05", "5e-2": "0.05", "0.0010": "0.001",
		"1.05": "1.05", "12345678901234567891": "12345678901234567891",
		"1e21": "1000000000000000000000", "1e22": "1e+22", "1.5e30": "1.5e+30", "-25e29": "-2.5e+30",
		"1e-21": "0.000000000000000000001", "1e-22": "1e-22", "1.5e-30": "1.5e-30",
		"1e99999999999": "1e99999999999", // exponent out of range: kept as written
	}
	for in, want := range cases {
		if got := string(appendNumber(nil, in)); got != want {
			t.Errorf("appendNumber(%s) = %s, want %s", in, got, want)
		}
	}
	// Values that differ stay apart, however close.
	apart := [][2]string{{"1", "1.0000000000000000001"}, {"12345678901234567890", "12345678901234567891"},
		{"1e21", "1e22"}, {"0.1", "0.01"}, {"-1", "1"}}
	for _, p := range apart {
		if a, b := string(appendNumber(nil, p[0])), string(appendNumber(nil, p[1])); a == b {
			t.Errorf("%s and %s both written %s", p[0], p[1], a)
		}
	}
}

func TestCanonicalValues(t *testing.T) {
	cases := map[string]string{
		` { "b" : [ 1 , 2.0 ] , "a" : { "y" : null , "x" : true } } `: `{"a":{"x":true,"y":null},"b":[1,2]}`,
		`"A\u0042\n\"\\\/"`:   `"AB\u000a\"\\/"`,
		`{"a":2,"a":1,"0":0}`: `{"0":0,"a":2,"a":1}`,
		`[]`:                  `[]`,
		`{}`:                  `{}`,
		`{"\u00e9":"é"}`:      `{"é":"é"}`,
	}
	for in, want := range cases {
		if got := canonical(in); got != want {
			t.Errorf("canonical(%s) = %s, want %s", in, got, want)
		}
	}
}
