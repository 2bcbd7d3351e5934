package attest

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
)

// Names of the agent's output logs (run --log-output): the files in the log
// dir and the names the statement records them under.
const (
	StdoutLog = "stdout"
	StderrLog = "stderr"
)

// OutputLog is what a statement records of one file of the agent's output
// kept by the supervisor: its name in the log dir, its size and the SHA-256
// of its bytes.
//
// In the predicate, member "logs" (after "applied"; omitted when the run
// kept no logs) is an array of objects sorted by name, names unique:
//
//	name       "stderr" or "stdout"
//	size       bytes in the file, decimal string
//	sha256     SHA-256 of the file's bytes, lowercase hex
//	truncated  true, only when the file lacks output the agent wrote
//	           (writing it failed, e.g. on a full disk: what was written
//	           before is what size and sha256 describe, and the rest went
//	           only to the supervisor's own stdout or stderr)
//
// For example:
//
//	"logs":[{"name":"stderr","size":"0",
//	  "sha256":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
//	 {"name":"stdout","size":"6",
//	  "sha256":"5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03",
//	  "truncated":true}]
//
// (shown across lines here; the predicate is compact JSON, see
// SignStatement).
//
// The member is decoded strictly, like the rest of the predicate: an
// unknown, duplicate or case-variant member name is malformed, and it is
// covered by the statement's signature.
type OutputLog struct {
	Name   string
	Size   uint64
	SHA256 []byte
	// Truncated: the file misses output (see above); Size and SHA256 are
	// still those of the file.
	Truncated bool
}

type outputLogJSON struct {
	Name      string `json:"name"`
	Size      uint64 `json:"size,string"`
	SHA256    string `json:"sha256"`
	Truncated bool   `json:"truncated,omitzero"`
}

func logsToJSON(ls []OutputLog) []outputLogJSON {
	var out []outputLogJSON
	for _, l := range ls {
		out = append(out, outputLogJSON{Name: l.Name, Size: l.Size, SHA256: hexOrEmpty(l.SHA256), Truncated: l.Truncated})
	}
	return out
}

func logsFromJSON(js []outputLogJSON) ([]OutputLog, error) {
	var out []OutputLog
	for _, j := range js {
		d, err := parseHex("log "+j.Name+" sha256", j.SHA256)
		if err != nil {
			return nil, err
		}
		out = append(out, OutputLog{Name: j.Name, Size: j.Size, SHA256: d, Truncated: j.Truncated})
	}
	return out, nil
}

// validateLogs checks that the logs have known names, sorted and unique, and
// digests of 32 bytes.
func validateLogs(ls []OutputLog) error {
	for i, l := range ls {
		if l.Name != StdoutLog && l.Name != StderrLog {
			return fmt.Errorf("log name %q is neither %q nor %q", l.Name, StderrLog, StdoutLog)
		}
		if len(l.SHA256) != 32 {
			return fmt.Errorf("log %q: digest of %d bytes", l.Name, len(l.SHA256))
		}
		if i > 0 && ls[i-1].Name >= l.Name {
			return fmt.Errorf("logs %q and %q not sorted and unique", ls[i-1].Name, l.Name)
		}
	}
	return nil
}

// Check reads r to its end, or to one byte past l.Size, and reports whether
// it holds exactly the bytes l records: nil, or an error wrapping
// ErrNotVerified that names the log, or the read error.
func (l *OutputLog) Check(r io.Reader) error {
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(r, int64(min(l.Size, 1<<62))+1))
	if err != nil {
		return fmt.Errorf("read log %q: %w", l.Name, err)
	}
	if uint64(n) != l.Size || !bytes.Equal(h.Sum(nil), l.SHA256) {
		return fmt.Errorf("log %q is not the one the statement records (%d bytes, sha256 %x): %w", l.Name, l.Size, l.SHA256, ErrNotVerified)
	}
	return nil
}
