package tlog

import (
	"github.com/transparency-dev/tessera/api"
)

// bundleEntries splits an entry bundle (C2SP tlog-tiles) into entries.
func bundleEntries(b []byte) ([][]byte, error) {
	var eb api.EntryBundle
	if err := eb.UnmarshalText(b); err != nil {
		return nil, err
	}
	return eb.Entries, nil
}
