package httpidem

import (
	"encoding/binary"
	"errors"
	"net/http"
)

// A stored response: a format byte, the status, the header fields (count,
// then each name and value, lengths as uvarints), then the body.
const recordFormat = 1

var errBadRecord = errors.New("httpidem: a stored response that is not one this package writes")

// encode stores status, the allowed fields of h and body.
func encode(status int, h http.Header, allow []string, body []byte) []byte {
	n := 0
	size := 3 + binary.MaxVarintLen64 + len(body)
	for _, name := range allow {
		for _, v := range h[name] {
			n++
			size += 2*binary.MaxVarintLen64 + len(name) + len(v)
		}
	}
	b := make([]byte, 0, size)
	b = append(b, recordFormat)
	b = binary.BigEndian.AppendUint16(b, uint16(status))
	b = binary.AppendUvarint(b, uint64(n))
	for _, name := range allow {
		for _, v := range h[name] {
			b = binary.AppendUvarint(b, uint64(len(name)))
			b = append(b, name...)
			b = binary.AppendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		}
	}
	return append(b, body...)
}

// decode reads a stored response back, its header fields added to h.
func decode(b []byte, h http.Header) (status int, body []byte, err error) {
	if len(b) < 4 || b[0] != recordFormat {
		return 0, nil, errBadRecord
	}
	status, b = int(binary.BigEndian.Uint16(b[1:3])), b[3:]
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return 0, nil, errBadRecord
	}
	b = b[k:]
	field := func() (string, bool) {
		l, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < l {
			return "", false
		}
		s := string(b[k : k+int(l)])
		b = b[k+int(l):]
		return s, true
	}
	for range n {
		name, ok := field()
		if !ok {
			return 0, nil, errBadRecord
		}
		v, ok := field()
		if !ok {
			return 0, nil, errBadRecord
		}
		h[name] = append(h[name], v)
	}
	return status, b, nil
}
