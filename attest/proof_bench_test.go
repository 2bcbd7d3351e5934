package attest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// bigEntries returns n added files, 100 per directory, as an agent that
// wrote a tree of n files leaves them (the directories themselves are not
// counted), sorted by path.
func bigEntries(n int) []Entry {
	es := make([]Entry, 0, n)
	for i := range n {
		es = append(es, Entry{Path: Path(fmt.Sprintf("src/d%04d/f%03d.go", i/100, i%100)), Change: Added,
			New: &State{Type: File, Mode: 0o644, UID: 1000, GID: 1000, Size: 1024 + uint64(i), MtimeNS: 1_700_000_000_000_000_000 + int64(i),
				SHA256: digest(fmt.Sprint(i))}})
	}
	return es
}

// bigSession writes the statement of n changes and its head into a
// directory as a run leaves them, and returns the directory.
func bigSession(b *testing.B, s *Signer, n int) string {
	b.Helper()
	launchEnv, err := SignLaunch(s, sampleLaunch(session1))
	if err != nil {
		b.Fatal(err)
	}
	st := sampleStatement(launchEnv, session1)
	st.Incomplete, st.Entries = nil, bigEntries(n)
	env, err := SignStatement(s, st)
	if err != nil {
		b.Fatal(err)
	}
	head, err := SignHead(s, HeadOf(st))
	if err != nil {
		b.Fatal(err)
	}
	// bench/proof times the CLI on the same files.
	dir := os.Getenv("LAYERSEAL_PROOF_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	if err := os.WriteFile(filepath.Join(dir, StatementFile), env, 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, HeadFile(StatementFile)), head, 0o644); err != nil {
		b.Fatal(err)
	}
	return dir
}

// proveFromDir is what `layerseal prove` does for one path: read the
// statement and its head, and prove.
func proveFromDir(dir string, p Path) ([]byte, error) {
	pr, err := OpenProver(dir)
	if err != nil {
		return nil, err
	}
	return pr.Prove(p, false)
}

// BenchmarkProof measures, on a statement of 100,000 changes, proving one
// path from the files a run leaves (reading and checking the statement
// included), and verifying an inclusion and an absence bundle; it reports
// each bundle's size. bench/proof prints them against the goals.
func BenchmarkProof(b *testing.B) {
	n := 100_000
	if testing.Short() {
		n = 2_000 // scripts/bench-smoke: only that it runs
	}
	s := testSigner(b, 1)
	dir := bigSession(b, s, n)
	// The absent path's neighbours are leaves 65535 and 65536, whose
	// audit paths share nothing but the root: the largest absence bundle.
	changed, absent := Path("src/d0500/f050.go"), Path("src/d0655/f035.gox")
	b.Run("prove", func(b *testing.B) {
		for b.Loop() {
			if _, err := proveFromDir(dir, absent); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, c := range []struct {
		name string
		p    Path
	}{{"inclusion", changed}, {"absence", absent}} {
		bundle, err := proveFromDir(dir, c.p)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("verify-"+c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := VerifyBundle(bundle, s.Public()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(bundle)), "bundle-bytes")
		})
	}
}
