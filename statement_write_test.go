package layerseal

import (
	"bytes"
	"crypto/ed25519"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/policy"
)

// TestWriteStatement: the statement goes to the output dir and the state
// dir, its head and Sigstore bundle to the output dir, and the journal of
// an empty change set the run applies to the state dir; when the output
// dir's statement cannot be written nothing of them is left and the run
// fails, and when only the state dir's copy cannot be, that is logged and
// the output dir is complete.
func TestWriteStatement(t *testing.T) {
	key, err := attest.NewSigner(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)))
	if err != nil {
		t.Fatal(err)
	}
	st := &attest.Statement{SessionID: attest.NewSessionID(), Launch: make([]byte, 32), Workspace: "/ws", Ended: time.Now().UTC()}
	b, err := signBounded(key, st, attest.MaxStatementSize)
	if err != nil {
		t.Fatal(err)
	}
	outFiles := []string{StatementFile, attest.HeadFile(StatementFile), SigstoreFile}
	newSession := func(t *testing.T) (*session, *strings.Builder) {
		dir := t.TempDir()
		s := &session{cfg: RunConfig{Key: key}, out: filepath.Join(dir, "out"), dir: sessionDir(filepath.Join(dir, "session"))}
		for _, d := range []string{s.out, string(s.dir)} {
			if err := os.Mkdir(d, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		var log strings.Builder
		s.log = func(format string, args ...any) { fmt.Fprintf(&log, format+"\n", args...) }
		return s, &log
	}
	exists := func(p string) bool { _, err := os.Lstat(p); return err == nil }

	t.Run("written", func(t *testing.T) {
		s, log := newSession(t)
		journaled, err := s.writeStatement(st, b)
		if err != nil {
			t.Fatal(err)
		}
		// An empty change set the run applies: its journal comes along.
		if j, err := s.dir.readJournal(); !journaled || err != nil || j == nil || j.State != journalApplied || j.Statement != fmt.Sprintf("%x", sha(b)) {
			t.Errorf("journaled %v, journal %+v, %v; want it applied, for this statement", journaled, j, err)
		}
		for _, p := range []string{filepath.Join(s.out, StatementFile), filepath.Join(string(s.dir), StatementFile)} {
			if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, b) {
				t.Errorf("%s: %d bytes, %v; want the signed statement", p, len(got), err)
			}
		}
		for _, name := range outFiles[1:] {
			if !exists(filepath.Join(s.out, name)) {
				t.Errorf("%s not written", name)
			}
		}
		if log.Len() > 0 {
			t.Errorf("logged %q", log.String())
		}
	})
	t.Run("output dir fails", func(t *testing.T) {
		s, _ := newSession(t)
		// A directory in the statement's place: its rename fails.
		if err := os.MkdirAll(filepath.Join(s.out, StatementFile, "x"), 0o700); err != nil {
			t.Fatal(err)
		}
		_, err := s.writeStatement(st, b)
		if err == nil || !strings.Contains(err.Error(), "the change set is kept in "+string(s.dir)) {
			t.Fatalf("error %v, want one saying where the change set is kept", err)
		}
		for _, p := range []string{filepath.Join(string(s.dir), StatementFile), filepath.Join(s.out, outFiles[1]), filepath.Join(s.out, outFiles[2]), s.dir.journal()} {
			if exists(p) {
				t.Errorf("%s is left, with no statement in the output dir", p)
			}
		}
	})
	t.Run("state dir fails", func(t *testing.T) {
		s, log := newSession(t)
		if err := os.MkdirAll(filepath.Join(string(s.dir), StatementFile, "x"), 0o700); err != nil {
			t.Fatal(err)
		}
		if _, err := s.writeStatement(st, b); err != nil {
			t.Fatal(err)
		}
		for _, name := range outFiles {
			if !exists(filepath.Join(s.out, name)) {
				t.Errorf("%s not written", name)
			}
		}
		if !strings.Contains(log.String(), "keeping a copy of the statement in the state dir") {
			t.Errorf("logged %q, want the state dir's copy reported", log.String())
		}
	})
	t.Run("staged", func(t *testing.T) {
		s, _ := newSession(t)
		s.cfg.Policy.Apply = policy.ApplyStage
		if journaled, err := s.writeStatement(st, b); err != nil || journaled || exists(s.dir.journal()) {
			t.Errorf("journaled %v, %v; want no journal for a change set the policy stages", journaled, err)
		}
	})
}
