package tlog

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

// ErrNotVerified is wrapped by every error that says a receipt, a
// checkpoint or a proof did not check out.
var ErrNotVerified = errors.New("not verified")

// Log is a transparency log of heads that this process appends to. The
// POSIX driver (OpenPOSIX, on a local directory) is the built-in one; a
// fleet's drivers (see docs/LOG.md) implement the same methods.
type Log interface {
	// Append adds entry and returns its index once a published
	// checkpoint commits to it (the entry is integrated).
	Append(ctx context.Context, entry []byte) (uint64, error)
	// Checkpoint is the newest published checkpoint, verified.
	Checkpoint(ctx context.Context) (*Checkpoint, error)
	// Inclusion is the inclusion proof of entry index in size size.
	Inclusion(ctx context.Context, index, size uint64) ([][]byte, error)
	// Consistency is the consistency proof from size from to size to.
	Consistency(ctx context.Context, from, to uint64) ([][]byte, error)
	// Entries yields the entries [from, to) of the tree of size size.
	Entries(ctx context.Context, from, to, size uint64) iter.Seq2[[]byte, error]
	// Close waits until every appended entry is published, then stops.
	Close(ctx context.Context) error

	// Origin is the log's name; Location where it is read from.
	Origin() string
	Location() string
	// Verifier checks the log's signature on its checkpoints.
	Verifier() note.Verifier
	// Cosigned returns the checkpoints witnesses published cosigned.
	Cosigned(ctx context.Context) []*Checkpoint
}

// Driver names, as a log location spells them: "posix:DIR", or a bare
// DIR, is the POSIX driver.
const DriverPOSIX = "posix"

// Open opens the log at loc for appending, with the driver that loc
// names ("posix:DIR" or a directory) and opts.
func Open(ctx context.Context, loc string, opts Options) (Log, error) {
	driver, rest, ok := strings.Cut(loc, ":")
	if !ok || strings.Contains(driver, "/") {
		driver, rest = DriverPOSIX, loc
	}
	switch driver {
	case DriverPOSIX:
		return OpenPOSIX(ctx, rest, opts)
	case "http", "https":
		return nil, fmt.Errorf("log %q: a URL is for reading a log; appending takes the log's directory on this machine", loc)
	default:
		return nil, fmt.Errorf("log %q: unknown log driver %q (this build has %q)", loc, driver, DriverPOSIX)
	}
}
