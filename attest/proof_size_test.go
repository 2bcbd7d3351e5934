package attest

import (
	"encoding/base64"
	"testing"
)

// TestBundleSize: on a change set of 100,000 changes, an absence bundle
// whose neighbours straddle the largest subtree boundary (their audit
// paths share nothing but the root), and bundles elsewhere, are at most
// 4 KiB.
func TestBundleSize(t *testing.T) {
	const n = 100_000
	s := testSigner(t, 1)
	es := bigEntries(n)
	root, err := MerkleRoot(es)
	if err != nil {
		t.Fatal(err)
	}
	launchEnv, err := SignLaunch(s, sampleLaunch(session1))
	if err != nil {
		t.Fatal(err)
	}
	st := sampleStatement(launchEnv, session1)
	st.Incomplete, st.Entries, st.Root, st.Count, st.AppliedRoot, st.AppliedCount, st.Complete = nil, es, root, n, root, n, true
	st.KeyID = s.KeyID()
	head, err := SignHead(s, HeadOf(st))
	if err != nil {
		t.Fatal(err)
	}
	// The goal is 4 KiB under ed25519. A bundle carries its head's
	// envelope in base64, so a larger signature adds its own size.
	limit := 4096
	if testAlg != AlgEd25519 {
		ed := testSignerOf(t, AlgEd25519, 1)
		edSt := *st
		edSt.KeyID = ed.KeyID()
		edHead, err := SignHead(ed, HeadOf(&edSt))
		if err != nil {
			t.Fatal(err)
		}
		limit += base64.StdEncoding.EncodedLen(len(head)) - base64.StdEncoding.EncodedLen(len(edHead))
	}
	pr, err := NewProver(st, head)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{1<<16 - 1, 1<<15 - 1, 0, n - 1, 12345, 99_000} {
		for _, p := range []Path{es[i].Path, es[i].Path + "x"} {
			b, err := pr.Prove(p, false)
			if err != nil {
				t.Fatal(err)
			}
			got, err := VerifyBundle(b, s.Public())
			if err != nil {
				t.Fatalf("%q: %v", p, err)
			}
			if len(b) > limit {
				t.Errorf("%s bundle of %q (leaf %d of %d) is %d bytes, over %d (4 KiB and what %s adds to the head)", got.Kind, p, i, n, len(b), limit, testAlg)
			}
		}
	}
}
