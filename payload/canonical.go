package payload

import (
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// appendCanonical appends the canonical text of a JSON value: objects with
// their members sorted by name (members of one name keep their order), no
// insignificant whitespace, strings decoded and escaped one way only, and
// numbers by their decimal value. Two values have the same canonical text
// exactly when they are equal under those rules.
func appendCanonical(dst []byte, r gjson.Result) []byte {
	c := canonicalizer{dst: dst}
	c.value(r)
	return c.dst
}

type canonicalizer struct {
	dst []byte
	// members is a stack: each object's members above its parent's, so
	// that one slice serves the whole document.
	members []member
}

type member struct {
	name  string
	value gjson.Result
}

func (c *canonicalizer) value(r gjson.Result) {
	switch r.Type {
	case gjson.Null:
		c.dst = append(c.dst, "null"...)
	case gjson.False:
		c.dst = append(c.dst, "false"...)
	case gjson.True:
		c.dst = append(c.dst, "true"...)
	case gjson.Number:
		c.dst = appendNumber(c.dst, r.Raw)
	case gjson.String:
		c.dst = appendString(c.dst, r.Str)
	default:
		if r.IsArray() {
			c.array(r)
		} else {
			c.object(r)
		}
	}
}

func (c *canonicalizer) array(r gjson.Result) {
	c.dst = append(c.dst, '[')
	first := true
	r.ForEach(func(_, v gjson.Result) bool {
		if !first {
			c.dst = append(c.dst, ',')
		}
		first = false
		c.value(v)
		return true
	})
	c.dst = append(c.dst, ']')
}

func (c *canonicalizer) object(r gjson.Result) {
	base := len(c.members)
	r.ForEach(func(k, v gjson.Result) bool {
		c.members = append(c.members, member{k.Str, v})
		return true
	})
	end := len(c.members)
	slices.SortStableFunc(c.members[base:end], func(a, b member) int { return strings.Compare(a.name, b.name) })
	c.dst = append(c.dst, '{')
	for i := base; i < end; i++ {
		if i > base {
			c.dst = append(c.dst, ',')
		}
		m := c.members[i] // read anew: a nested object may have grown the stack
		c.dst = appendString(c.dst, m.name)
		c.dst = append(c.dst, ':')
		c.value(m.value)
	}
	c.dst = append(c.dst, '}')
	c.members = c.members[:base]
}

// appendString appends s quoted, escaping only what JSON requires, so
// that "\u0041" and "A" are written alike.
func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

// plainDigits bounds the zeros a number is padded with in plain decimal
// form; beyond it the number is written with an exponent.
const plainDigits = 21

// appendNumber appends a JSON number by its exact decimal value: 1, 1.0,
// 1.00 and 10e-1 are written alike ("1"), and nothing is rounded, so
// integers beyond float64's precision stay apart. A number too large or
// too small for plain decimal form gets an exponent (1.5e+30). Text that
// is not a JSON number, or whose exponent is out of range, is kept as
// written.
func appendNumber(dst []byte, raw string) []byte {
	s, neg := strings.CutPrefix(raw, "-")
	mant, exp := s, 0
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, err := strconv.Atoi(s[i+1:])
		if err != nil || e > 1_000_000 || e < -1_000_000 {
			return append(dst, raw...)
		}
		mant, exp = s[:i], e
	}
	whole, frac, _ := strings.Cut(mant, ".")
	if whole == "" || !allDigits(whole) || !allDigits(frac) {
		return append(dst, raw...)
	}
	// value = digits × 10^exp, digits without leading or trailing zeros.
	whole = strings.TrimLeft(whole, "0")
	if whole == "" {
		n := len(frac)
		frac = strings.TrimLeft(frac, "0")
		exp -= n - len(frac)
	}
	var digits string
	if trimmed := strings.TrimRight(frac, "0"); trimmed != "" {
		digits, exp = whole+trimmed, exp-len(trimmed)
	} else {
		n := len(whole)
		digits = strings.TrimRight(whole, "0")
		exp += n - len(digits)
	}
	if digits == "" {
		return append(dst, '0') // -0 is 0
	}
	if neg {
		dst = append(dst, '-')
	}
	point := len(digits) + exp // digits before the decimal point
	switch {
	case exp >= 0 && exp <= plainDigits:
		dst = append(dst, digits...)
		for range exp {
			dst = append(dst, '0')
		}
		return dst
	case exp < 0 && point > 0:
		dst = append(dst, digits[:point]...)
		dst = append(dst, '.')
		return append(dst, digits[point:]...)
	case exp < 0 && point > -plainDigits:
		dst = append(dst, '0', '.')
		for range -point {
			dst = append(dst, '0')
		}
		return append(dst, digits...)
	}
	dst = append(dst, digits[0])
	if len(digits) > 1 {
		dst = append(dst, '.')
		dst = append(dst, digits[1:]...)
	}
	dst = append(dst, 'e')
	if point-1 >= 0 {
		dst = append(dst, '+')
	}
	return strconv.AppendInt(dst, int64(point-1), 10)
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
