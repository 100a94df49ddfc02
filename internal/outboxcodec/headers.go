// Package outboxcodec encodes an outgoing message's headers as the stores
// keep them: bytes, since header names and values may be any bytes (Kafka
// headers), which a text column or a DynamoDB map's keys would refuse.
package outboxcodec

import (
	"encoding/binary"
	"errors"
	"maps"
	"slices"
)

// ErrCorrupt: stored headers that Encode did not write.
var ErrCorrupt = errors.New("outboxcodec: headers cut short")

// Encode is h as each name and value, in name order, after its length
// (uvarint). Never nil, so that a store keeps an empty value.
func Encode(h map[string]string) []byte {
	b := []byte{}
	for _, k := range slices.Sorted(maps.Keys(h)) {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(h[k])))
		b = append(b, h[k]...)
	}
	return b
}

// Decode reads what Encode wrote; nil for no headers.
func Decode(b []byte) (map[string]string, error) {
	if len(b) == 0 {
		return nil, nil
	}
	h := map[string]string{}
	next := func() (string, error) {
		n, w := binary.Uvarint(b)
		if w <= 0 || uint64(len(b)-w) < n {
			return "", ErrCorrupt
		}
		s := string(b[w : w+int(n)])
		b = b[w+int(n):]
		return s, nil
	}
	for len(b) > 0 {
		k, err := next()
		if err != nil {
			return nil, err
		}
		v, err := next()
		if err != nil {
			return nil, err
		}
		h[k] = v
	}
	return h, nil
}
