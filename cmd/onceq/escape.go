package main

import (
	"strconv"
	"unicode"
	"unicode/utf8"
)

// field is a string onceq prints that it did not write itself (a key, an
// ID, a destination, an owner, a reason, an error's text, what a server
// answered) as it goes on one line of a terminal: as it is when each of its
// characters is graphic or an ASCII space, else quoted as Go quotes a
// string (strconv.Quote), which escapes line breaks, every other control
// character, Unicode bidirectional controls and invalid bytes. So no
// stored string can start a line of its own, move the cursor, recolour
// or reorder text; and a string beginning with a quote is quoted too, so
// that a plain one is never read as a quoted one.
func field(s string) string {
	if plain(s) {
		return s
	}
	return strconv.Quote(s)
}

// plain: valid UTF-8 of graphic characters and ASCII spaces, not
// beginning with a quote.
func plain(s string) bool {
	if s == "" {
		return true
	}
	if s[0] == '"' || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		// IsPrint leaves out every control and format character (the
		// bidirectional controls among them), and the line and paragraph
		// separators.
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
