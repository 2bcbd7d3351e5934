package layerseal

import (
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"slices"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/layerseal/layerseal/attest"
)

// TestSignBounded: a statement that would be larger than the limit is
// signed with fewer entries and an entry-budget reason where the list
// stops; what is signed verifies and fits, lists within 1% of the most
// entries that fit, and the statement no longer holds those left out.
func TestSignBounded(t *testing.T) {
	key, err := attest.NewSigner(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)))
	if err != nil {
		t.Fatal(err)
	}
	launch := &attest.LaunchRecord{SessionID: attest.NewSessionID(), Workspace: "/ws", Kernel: attest.Kernel{Release: "6.1"},
		Agent: specs.Process{Args: []string{"a"}}, Sandbox: attest.Sandbox{Terminal: "streams", Network: "host", Seccomp: "unconfined"},
		Policy: attest.Policy{DigestCap: 1}, Started: time.Now().UTC()}
	lenv, err := attest.SignLaunch(key, launch)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(lenv)
	st := &attest.Statement{SessionID: launch.SessionID, Launch: sum[:], Workspace: "/ws", Ended: time.Now().UTC()}
	for i := range 2000 {
		// Paths of varied length, some files with a digest (and so a
		// subject), all within the cut's reason.
		e := attest.Entry{Path: attest.Path(fmt.Sprintf("d/%04d-%0*d", i, 100+i%150, 0)), Change: attest.Added,
			New: &attest.State{Type: attest.File, Mode: 0o644}}
		if i%3 == 0 {
			e.New.SHA256 = make([]byte, 32)
		}
		st.Entries = append(st.Entries, e)
	}
	st.Applied = append([]attest.Entry{}, st.Entries[:1500]...)
	st.Violations = []attest.Violation{{Path: st.Entries[1999].Path, Rule: "d/**", Action: attest.Reverted}}
	orig := *st
	orig.Entries = slices.Clone(st.Entries)
	all := st.Entries
	const limit = 200 << 10
	b, err := signBounded(key, st, limit)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > limit {
		t.Fatalf("signed %d bytes, limit %d", len(b), limit)
	}
	got, err := attest.VerifyStatement(b, key.Public(), lenv)
	if err != nil {
		t.Fatal(err)
	}
	n := len(got.Entries)
	if n == 0 || n >= 2000 || got.Complete || len(got.Incomplete) != 1 || got.Incomplete[0].Code != attest.EntryBudget ||
		got.Incomplete[0].Path != orig.Entries[n].Path || len(got.AppliedEntries()) > n {
		t.Errorf("%d entries, %d applied, reasons %+v", n, len(got.AppliedEntries()), got.Incomplete)
	}
	t.Logf("%d entries listed in %d bytes", n, len(b))
	// 1% more entries do not fit.
	more := n + n/100 + 1
	if b, err := attest.SignStatement(key, cutStatement(&orig, more, limit)); err != nil || len(b) <= limit {
		t.Errorf("cut too deep: %d entries listed, but %d fit in %d bytes (%v)", n, more, len(b), err)
	}
	if len(st.Entries) != n || all[n].New != nil || all[1999].Path != "" {
		t.Errorf("the statement still holds entries it does not list: %d entries, left out %+v", len(st.Entries), all[n])
	}
}
