package attest

import (
	"crypto/sha256"
	"fmt"
	"testing"
)

// benchStatement returns a statement of session1 with n added files.
func benchStatement(launchEnv []byte, n int) *Statement {
	st := sampleStatement(launchEnv, session1)
	st.Entries = make([]Entry, n)
	for i := range st.Entries {
		sum := sha256.Sum256([]byte{byte(i), byte(i >> 8), byte(i >> 16)})
		st.Entries[i] = Entry{Path: Path(fmt.Sprintf("src/pkg%03d/file%06d.go", i/100, i)), Change: Added,
			New: &State{Type: File, Mode: 0o644, UID: 1000, GID: 1000, Size: uint64(i), MtimeNS: 1_700_000_000_000_000_000, SHA256: sum[:]}}
	}
	return st
}

// benchArtifacts returns, for s, a head-sized and a statement-sized
// artifact (a statement of 1,000 changes) as a signing function each,
// with the launch record they are bound to. The function signs a
// different artifact for each i: ML-DSA signing is deterministic and
// repeats its rejection sampling a number of times that depends on the
// message, so one message would measure one draw.
func benchArtifacts(b *testing.B, s *Signer) (launchEnv []byte, arts []struct {
	name string
	sign func(i int) ([]byte, error)
}) {
	b.Helper()
	launchEnv, err := SignLaunch(s, sampleLaunch(session1))
	if err != nil {
		b.Fatal(err)
	}
	st := benchStatement(launchEnv, 1000)
	if _, err := SignStatement(s, st); err != nil {
		b.Fatal(err)
	}
	h := HeadOf(st)
	return launchEnv, []struct {
		name string
		sign func(i int) ([]byte, error)
	}{
		{"head", func(i int) ([]byte, error) { h.Count = uint64(i); return SignHead(s, h) }},
		{"statement-1000", func(i int) ([]byte, error) { st.Stats.UpperEntries = uint64(i); return SignStatement(s, st) }},
	}
}

// BenchmarkSign signs a head and a statement of 1,000 changes with a key
// of each algorithm, reporting the envelope's size.
func BenchmarkSign(b *testing.B) {
	for _, alg := range Algorithms() {
		s := testSignerOf(b, alg, 1)
		_, arts := benchArtifacts(b, s)
		for _, a := range arts {
			b.Run("alg="+alg+"/artifact="+a.name, func(b *testing.B) {
				var env []byte
				for i := 0; b.Loop(); i++ {
					var err error
					if env, err = a.sign(i); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(len(env)), "envelope-B")
			})
		}
	}
}

// BenchmarkVerify verifies what BenchmarkSign signs (a statement with its
// launch record's binding), each time the same envelope: verification
// does the same work for every message.
func BenchmarkVerify(b *testing.B) {
	for _, alg := range Algorithms() {
		s := testSignerOf(b, alg, 1)
		launchEnv, arts := benchArtifacts(b, s)
		for _, a := range arts {
			env, err := a.sign(0)
			if err != nil {
				b.Fatal(err)
			}
			verify := func() error { _, err := VerifyHead(env, s.Public()); return err }
			if a.name != "head" {
				verify = func() error { _, err := VerifyStatement(env, s.Public(), launchEnv); return err }
			}
			b.Run("alg="+alg+"/artifact="+a.name, func(b *testing.B) {
				for b.Loop() {
					if err := verify(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(len(env)), "envelope-B")
			})
		}
	}
}
