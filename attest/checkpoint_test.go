package attest

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// sampleChain signs n checkpoints of session: every third one unchanged
// since the one before it, the others listing a growing change set.
func sampleChain(t *testing.T, s *Signer, n int, session string) (launchEnv []byte, envs [][]byte, log *CheckpointLog) {
	t.Helper()
	launchEnv, err := SignLaunch(s, sampleLaunch(session))
	if err != nil {
		t.Fatal(err)
	}
	log = &CheckpointLog{}
	all := sampleEntries()
	last := uint64(0)
	for i := 1; i <= n; i++ {
		c := &Checkpoint{
			SessionID: session, Launch: sha(launchEnv), Workspace: "/home/dev/proj\xff",
			Taken: time.Date(2025, 11, 30, 10, i, 0, 0, time.UTC), Probe: digest(string(rune('a' + i))), ProbeEntries: uint64(10 + i),
		}
		if i%3 == 0 {
			c.Unchanged, c.SameAs = true, last
		} else {
			c.Entries = all[:min(i, len(all))]
			if i == 5 {
				c.Incomplete = []Reason{{Code: Unstable, Path: "src/main.go", Detail: "changed while hashed"}}
			}
		}
		env, err := log.Append(s, c)
		if err != nil {
			t.Fatalf("checkpoint %d: %v", i, err)
		}
		if !c.Unchanged {
			last = c.Seq
		}
		envs = append(envs, env)
	}
	return launchEnv, envs, log
}

func TestCheckpointChainVerifies(t *testing.T) {
	s := testSigner(t, 1)
	launch, envs, log := sampleChain(t, s, 8, session1)
	cps, err := VerifyChain(envs, s.Public(), launch)
	if err != nil {
		t.Fatalf("VerifyChain: %v", err)
	}
	if len(cps) != 8 || !cps[2].Unchanged || cps[2].SameAs != 2 || !bytes.Equal(cps[2].Root, cps[1].Root) {
		t.Fatalf("unexpected chain: %+v", cps[2])
	}
	if !cps[3].Complete || cps[4].Complete || !cps[5].Unchanged || cps[5].Complete || len(cps[5].Incomplete) != 1 {
		t.Errorf("completeness not carried: 4:%t 5:%t 6:%t", cps[3].Complete, cps[4].Complete, cps[5].Complete)
	}
	// Any two heads have a consistency proof.
	leaves := log.Leaves()
	for m := 1; m <= 8; m++ {
		for n := m; n <= 8; n++ {
			p, err := ConsistencyProof(leaves, uint64(m), uint64(n))
			if err != nil {
				t.Fatal(err)
			}
			if err := VerifyConsistency(uint64(m), uint64(n), p, cps[m-1].Log.Root, cps[n-1].Log.Root); err != nil {
				t.Errorf("consistency %d→%d: %v", m, n, err)
			}
			if m < n {
				if err := VerifyConsistency(uint64(m), uint64(n), p, cps[n-1].Log.Root, cps[n-1].Log.Root); err == nil {
					t.Errorf("consistency %d→%d verified against the wrong old root", m, n)
				}
			}
		}
	}
	// Each file verifies on its own too.
	for i, env := range envs {
		if _, err := VerifyCheckpoint(env, s.Public()); err != nil {
			t.Errorf("checkpoint %d alone: %v", i+1, err)
		}
	}
}

func TestCheckpointChainTampering(t *testing.T) {
	s := testSigner(t, 1)
	launch, envs, _ := sampleChain(t, s, 6, session1)
	without := func(i int) [][]byte { return append(append([][]byte{}, envs[:i]...), envs[i+1:]...) }
	swapped := append([][]byte{}, envs...)
	swapped[1], swapped[2] = swapped[2], swapped[1]

	// A chain rewritten from checkpoint 2 on, signed with the same key:
	// its heads are consistent with each other, but not with checkpoint 1.
	_, other, _ := sampleChain(t, s, 6, session2)
	_, rewritten, _ := func() ([]byte, [][]byte, *CheckpointLog) {
		log := &CheckpointLog{}
		var out [][]byte
		c1, _ := ReadCheckpoint(envs[0])
		c1.Entries = c1.Entries[:0]
		c1.Unchanged, c1.SameAs = false, 0
		env, err := log.Append(s, c1)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, env)
		return nil, out, log
	}()
	mixed := append([][]byte{envs[0]}, append([][]byte{rewritten[0]}, envs[2:]...)...)
	otherKey := testSigner(t, 2)
	_, foreign, _ := sampleChain(t, otherKey, 6, session1)

	launch2, err := SignLaunch(s, sampleLaunch(session2))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		envs  [][]byte
		chain bool // ErrChain rather than ErrNotVerified
	}{
		{"first dropped", without(0), true},
		{"middle dropped", without(2), true},
		{"reordered", swapped, true},
		{"repeated", append(append([][]byte{}, envs[:3]...), envs[2:]...), true},
		{"rewritten checkpoint", mixed, true},
		{"another key", append(append([][]byte{}, envs[:2]...), foreign[2:]...), false},
		{"another session's checkpoint", append(append([][]byte{}, envs[:2]...), other[2]), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := VerifyChain(c.envs, s.Public(), launch)
			if err == nil {
				t.Fatal("verified")
			}
			if c.chain && !errors.Is(err, ErrChain) && !errors.Is(err, ErrNotVerified) {
				t.Errorf("error %v is neither ErrChain nor ErrNotVerified", err)
			}
			if !c.chain && !errors.Is(err, ErrNotVerified) {
				t.Errorf("error %v is not ErrNotVerified", err)
			}
		})
	}
	if _, err := VerifyChain(envs, s.Public(), launch2); !errors.Is(err, ErrNotVerified) {
		t.Errorf("chain verified against another launch record: %v", err)
	}
	if _, err := VerifyCheckpoint(envs[0], otherKey.Public()); !errors.Is(err, ErrNotVerified) {
		t.Errorf("checkpoint verified with another key: %v", err)
	}
	// Every byte of the payload matters: flipping one is refused.
	for _, i := range []int{40, 200, len(envs[3]) / 2, len(envs[3]) - 120} {
		bad := append([]byte{}, envs[3]...)
		bad[i] ^= 1
		if _, err := VerifyCheckpoint(bad, s.Public()); err == nil {
			t.Errorf("byte %d flipped: verified", i)
		}
	}
}

func TestCheckpointStatementHead(t *testing.T) {
	s := testSigner(t, 1)
	launch, envs, _ := sampleChain(t, s, 3, session1)
	last, err := VerifyCheckpoint(envs[2], s.Public())
	if err != nil {
		t.Fatal(err)
	}
	st := sampleStatement(launch, session1)
	st.CheckpointHead = sha(envs[2])
	if err := CheckStatementHead(st, envs[2], last); err != nil {
		t.Errorf("bound statement: %v", err)
	}
	if err := CheckStatementHead(st, envs[1], last); !errors.Is(err, ErrNotVerified) {
		t.Errorf("statement bound to checkpoint 3 accepted with checkpoint 2 last: %v", err)
	}
	if err := CheckStatementHead(st, nil, nil); !errors.Is(err, ErrNotVerified) {
		t.Errorf("statement with a head accepted without checkpoints: %v", err)
	}
	st.CheckpointHead = nil
	if err := CheckStatementHead(st, envs[2], last); !errors.Is(err, ErrNotVerified) {
		t.Errorf("statement without a head accepted with checkpoints: %v", err)
	}
}

func TestCheckpointStrictDecoding(t *testing.T) {
	s := testSigner(t, 1)
	_, envs, _ := sampleChain(t, s, 2, session1)
	c, err := ReadCheckpoint(envs[1])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ReadCheckpoint(append(bytes.TrimSuffix(envs[1], []byte("\n")), []byte(" \n")...)); !errors.Is(err, ErrMalformed) {
		t.Errorf("trailing space: %v", err)
	}
	// A statement is not a checkpoint.
	_, stEnv := signedPair(t, s)
	if _, err := VerifyCheckpoint(stEnv, s.Public()); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "unsupported format") {
		t.Errorf("statement read as checkpoint: %v", err)
	}
	if c.Seq != 2 || c.Log.Size != 2 {
		t.Errorf("seq %d, log size %d", c.Seq, c.Log.Size)
	}
}
