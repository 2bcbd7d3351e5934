package attest

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"
)

// FuzzVerifyLaunch signs arbitrary payloads with a test key, so inputs
// reach the launch-record parser, and checks that every answer is verified
// or one of the two error classes, and that an accepted payload is exactly
// what SignLaunch makes of the record it decoded to.
func FuzzVerifyLaunch(f *testing.F) {
	s := testSigner(f, 1)
	launchEnv, _ := signedPair(f, s)
	f.Add(payloadOf(f, launchEnv))
	f.Fuzz(func(t *testing.T, payload []byte) {
		env := reseal(t, s, payload)
		l, err := VerifyLaunch(env, s.Public())
		if err != nil {
			if err != ErrNotVerified && !errors.Is(err, ErrMalformed) {
				t.Fatalf("error of neither class: %v", err)
			}
			return
		}
		again := *l
		env2, err := SignLaunch(s, &again)
		if err != nil {
			t.Fatalf("verified launch record does not sign again: %v", err)
		}
		if !bytes.Equal(env2, env) {
			t.Fatalf("accepted payload is not the one encoding:\n%s\nre-signed:\n%s", payload, payloadOf(t, env2))
		}
		if !reflect.DeepEqual(&again, l) {
			t.Fatalf("signing changed the verified launch record")
		}
	})
}

// FuzzInclusion builds a tree of size leaves, proves the leaf at index,
// then lets the fuzzer change the proof, the index, the size or the leaf:
// the untouched proof must verify, and a changed one must not.
func FuzzInclusion(f *testing.F) {
	f.Add(uint16(1), uint16(0), []byte{}, uint8(0))
	f.Add(uint16(7), uint16(3), []byte{0, 1}, uint8(1))
	f.Add(uint16(300), uint16(257), []byte{5, 0x80}, uint8(2))
	f.Fuzz(func(t *testing.T, size, index uint16, flips []byte, what uint8) {
		if size == 0 || size > 1024 {
			return
		}
		index %= size
		entries := make([]Entry, size)
		for i := range entries {
			entries[i] = Entry{Path: Path(fmt.Sprintf("p%04d", i)), Change: Added, New: &State{Type: FIFO, Mode: 0o600}}
		}
		tree, err := NewTree(entries)
		if err != nil {
			t.Fatal(err)
		}
		proof, err := tree.InclusionProof(uint64(index))
		if err != nil {
			t.Fatal(err)
		}
		e := entries[index]
		if err := VerifyInclusion(&e, uint64(index), uint64(size), proof, tree.Root()); err != nil {
			t.Fatalf("untouched proof of leaf %d of %d: %v", index, size, err)
		}
		idx, sz := uint64(index), uint64(size)
		changed := false
		switch what % 4 {
		case 0: // flip proof bits: pairs of (hash index, bit)
			orig := bytes.Join(proof, nil)
			for i := 0; i+1 < len(flips) && len(proof) > 0; i += 2 {
				h := int(flips[i]) % len(proof)
				bit := flips[i+1]
				proof[h] = bytes.Clone(proof[h])
				proof[h][int(bit)%len(proof[h])] ^= bit
			}
			changed = !bytes.Equal(orig, bytes.Join(proof, nil))
		case 1: // another index
			if len(flips) > 0 && flips[0] != 0 {
				idx = (idx + uint64(flips[0])) % sz
				changed = idx != uint64(index)
			}
		case 2: // drop or add a hash
			if len(proof) > 0 && len(flips)%2 == 0 {
				proof = proof[:len(proof)-1]
			} else {
				proof = append(proof, make([]byte, 32))
			}
			changed = true
		case 3: // another leaf
			e.New = &State{Type: FIFO, Mode: 0o600 | uint32(len(flips)%2)<<2}
			e.Path = Path(fmt.Sprintf("p%04d", int(index)+len(flips)))
			changed = e.Path != entries[index].Path || e.New.Mode != 0o600
		}
		err = VerifyInclusion(&e, idx, sz, proof, tree.Root())
		if changed && err == nil {
			t.Fatalf("changed proof (%d) of leaf %d of %d verified", what%4, index, size)
		}
		if err != nil && err != ErrNotVerified {
			t.Fatalf("refusal of the wrong class: %v", err)
		}
	})
}

// FuzzCheckpointChain replaces one checkpoint of a signed chain, some of
// whose checkpoints list only their difference, with an arbitrary payload
// signed with the chain's key. Reading the chain without the key and
// resolving its lists must not fail in any other way than the error
// classes, and verifying it must either refuse it or resolve to the very
// list the untouched chain does.
func FuzzCheckpointChain(f *testing.F) {
	s := testSigner(f, 1)
	launch, envs, _ := sampleChain(f, s, 8, session1)
	for _, k := range []int{0, 2, 3, 7} {
		f.Add(uint8(k), payloadOf(f, envs[k]))
	}
	want := sampleListAt(8)
	f.Fuzz(func(t *testing.T, k uint8, payload []byte) {
		chain := append([][]byte(nil), envs...)
		chain[int(k)%len(chain)] = reseal(t, s, payload)
		var cps []*Checkpoint
		for _, env := range chain {
			c, err := ReadCheckpoint(env)
			if err != nil {
				if !errors.Is(err, ErrMalformed) && err != ErrNotVerified {
					t.Fatalf("read: error of neither class: %v", err)
				}
				break
			}
			cps = append(cps, c)
		}
		if len(cps) == len(chain) {
			if _, err := ChangesOf(cps); err != nil && !errors.Is(err, ErrChain) && err != ErrNotVerified {
				t.Fatalf("resolve: error of neither class: %v", err)
			}
		}
		_, all, err := VerifyChain(chain, s.Public(), launch)
		if err != nil {
			if !errors.Is(err, ErrChain) && !errors.Is(err, ErrNotVerified) && !errors.Is(err, ErrMalformed) {
				t.Fatalf("verify: error of no class: %v", err)
			}
			return
		}
		if !reflect.DeepEqual(all, want) {
			t.Fatalf("a changed chain verified and resolves to\n%+v\nwant\n%+v", all, want)
		}
	})
}
