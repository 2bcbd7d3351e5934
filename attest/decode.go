package attest

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Input size limits of the verifiers: a whole envelope file.
const (
	MaxStatementSize = 256 << 20
	MaxLaunchSize    = 1 << 20
)

var (
	encodeOptions = json.JoinOptions(
		json.Deterministic(true),
		jsontext.AllowInvalidUTF8(false),
	)
	decodeOptions = json.JoinOptions(
		json.RejectUnknownMembers(true),
		json.MatchCaseInsensitiveNames(false),
		jsontext.AllowDuplicateNames(false),
		jsontext.AllowInvalidUTF8(false),
	)
)

// canonicalJSON returns the one encoding of v: compact, members in
// declaration order, map keys sorted, minimal string escaping.
func canonicalJSON(v any) ([]byte, error) {
	return json.Marshal(v, encodeOptions)
}

// appendWriter appends what is written to b. (The encoder treats a
// bytes.Buffer specially and grows it to keep a quarter of it free,
// which copies a large output several times.)
type appendWriter struct {
	b     []byte
	limit int // when not 0, the most bytes b may hold: past it, ErrTooLarge
}

func (w *appendWriter) Write(p []byte) (int, error) {
	if w.limit > 0 && len(w.b)+len(p) > w.limit {
		return 0, ErrTooLarge
	}
	if w.limit > 0 && len(w.b)+len(p) > cap(w.b) {
		// Grow as append would, but never past the limit.
		b := make([]byte, len(w.b), min(max(2*cap(w.b), len(w.b)+len(p)), w.limit))
		w.b = append(b[:copy(b, w.b)], p...)
		return len(p), nil
	}
	w.b = append(w.b, p...)
	return len(p), nil
}

// strictJSON decodes exactly one JSON value from b into v, refusing unknown
// members (names match case-sensitively, so a case variant is unknown),
// duplicate names, invalid UTF-8 and trailing data.
func strictJSON(b []byte, v any, what string) error {
	if err := json.Unmarshal(b, v, decodeOptions); err != nil {
		return malformed("decode %s: %s", what, jsonProblem(err))
	}
	return nil
}

// jsonProblem says what a decoding error found, in the input's terms
// rather than the decoder's (no Go type names).
func jsonProblem(err error) string {
	var se *json.SemanticError
	if errors.As(err, &se) {
		at := se.JSONPointer
		if at == "" {
			at = "/"
		}
		if se.Err != nil {
			return fmt.Sprintf("at %q: %v", string(at), se.Err)
		}
		return fmt.Sprintf("at %q: a JSON %v is not what belongs there", string(at), se.JSONKind)
	}
	return strings.TrimPrefix(err.Error(), "jsontext: ")
}

// canonicalCheck requires b to be the canonical encoding of v (followed by
// one newline when newline is set). It compares the encoding with b as it
// is written, holding no copy of it, and stops at the first byte that
// differs.
func canonicalCheck(b []byte, v any, newline bool, what string) error {
	w := &compareWriter{want: b}
	err := json.MarshalWrite(w, v, encodeOptions)
	if err != nil && !w.differs {
		return malformed("re-encode %s: %v", what, err)
	}
	if newline && !w.differs {
		w.Write([]byte{'\n'})
	}
	if w.differs || len(w.want) != 0 {
		return malformed("%s is not in its one valid encoding", what)
	}
	return nil
}

// compareWriter compares what is written with want, consuming it: past
// the first byte that differs it fails (and differs is set).
type compareWriter struct {
	want    []byte
	differs bool
}

var errDiffers = errors.New("the encoding differs")

func (w *compareWriter) Write(p []byte) (int, error) {
	if w.differs || len(p) > len(w.want) || !bytes.Equal(p, w.want[:len(p)]) {
		w.differs = true
		return 0, errDiffers
	}
	w.want = w.want[len(p):]
	return len(p), nil
}

// checkHex requires s to be 64 lowercase hex digits (a SHA-256 digest).
func checkHex(what, s string) error {
	if _, err := parseHex(what, s); err != nil {
		return err
	}
	return nil
}

func parseHex(what, s string) ([]byte, error) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 32 || hex.EncodeToString(b) != s {
		return nil, fmt.Errorf("%s %q is not 64 lowercase hex digits", what, s)
	}
	return b, nil
}

// checkID requires s to be a session ID: 32 lowercase hex digits.
func checkSessionID(s string) error {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 16 || hex.EncodeToString(b) != s {
		return fmt.Errorf("session id %q is not 32 lowercase hex digits", s)
	}
	return nil
}

// formatTime returns the one spelling of t: RFC 3339 in UTC with nanoseconds,
// trailing zeros of the fraction dropped.
func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// parseTime parses the one spelling of a time.
func parseTime(what, s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || formatTime(t) != s {
		return time.Time{}, fmt.Errorf("%s %q is not an RFC 3339 UTC time", what, s)
	}
	return t.UTC(), nil
}

// checkTime requires t to survive formatTime and parseTime.
func checkTime(what string, t time.Time) error {
	_, err := parseTime(what, formatTime(t))
	return err
}
