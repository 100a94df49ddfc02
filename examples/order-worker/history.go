package main

import (
	"fmt"
	"os"

	"github.com/onceq/onceq/batch"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/examples/storehistory"
)

// openHistory wraps store in a recorder appending to path, and returns
// what closes the file. The file is written unbuffered, line by line, so
// that a killed worker's history holds every call it began.
func openHistory(path string, store dedup.Store) (*storehistory.Recorder, func(), error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("-history: %w", err)
	}
	return storehistory.New(store, f), func() { _ = f.Close() }, nil
}

// openOffsetsHistory wraps batch mode's offset store in a recorder
// appending to path, as openHistory does the records store.
func openOffsetsHistory(path string, store batch.Store) (*storehistory.Offsets, func(), error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("-history: %w", err)
	}
	return storehistory.NewOffsets(store, f), func() { _ = f.Close() }, nil
}
