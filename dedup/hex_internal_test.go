package dedup

import (
	"strings"
	"testing"
)

func TestIsHex64EveryByte(t *testing.T) {
	base := strings.Repeat("0123456789abcdef", 4)
	if !isHex64(base) {
		t.Fatal("64 lowercase hex digits refused")
	}
	for c := 0; c < 256; c++ {
		s := base[:63] + string([]byte{byte(c)})
		want := strings.IndexByte("0123456789abcdef", byte(c)) >= 0
		if got := isHex64(s); got != want {
			t.Errorf("last byte %q: isHex64 %v, want %v", byte(c), got, want)
		}
	}
	if isHex64(base[:63]) || isHex64(base+"0") {
		t.Fatal("a length other than 64 accepted")
	}
}
