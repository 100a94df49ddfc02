package testenv

import "strings"

// EmptySegment returns the part of an error's text where a segment is
// empty, "" when none is: a wrapper that printed an empty cause or name
// (`(misconfigured): : the table`), a text that starts or ends with a
// separator, an empty pair of parentheses, or a fmt verb fault (`%!v`).
// An error text names what is wrong at each of its levels; an empty
// segment is a level that says nothing.
func EmptySegment(text string) string {
	segments := strings.Split(text, ": ")
	for i, seg := range segments {
		if strings.TrimSpace(seg) == "" {
			return excerpt(text, strings.Join(segments[:i], ": "))
		}
	}
	if t := strings.TrimSpace(text); strings.HasSuffix(t, ":") {
		return excerpt(text, t[:len(t)-1])
	}
	for _, bad := range []string{"()", "%!"} {
		if i := strings.Index(text, bad); i >= 0 {
			return excerpt(text, text[:i])
		}
	}
	return ""
}

// excerpt is text from a little before where its fault begins, where
// being the text before the fault.
func excerpt(text, before string) string {
	start := max(0, len(before)-30)
	end := min(len(text), len(before)+30)
	return "…" + text[start:end] + "…"
}
