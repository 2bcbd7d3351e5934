package attest_test

import (
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/layerseal/layerseal/attest"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Sign a launch record before the run and a statement after it, then
// verify the statement together with its launch record.
func Example() {
	// Real keys come from GenerateKey and LoadPrivateKey.
	signer, _ := attest.NewSigner(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)))

	launch := &attest.LaunchRecord{
		SessionID: "0123456789abcdef0123456789abcdef", // NewSessionID()
		Workspace: "/home/dev/proj",
		Lower:     attest.LowerIdentity{Dev: 2049, Ino: 131073, MountID: 42, MountIDKnown: true},
		Overlay:   attest.OverlayOptions{Options: []string{"rw", "redirect_dir=nofollow"}},
		Kernel:    attest.Kernel{Release: "6.18.0"},
		Agent:     specs.Process{Args: []string{"agent"}, Cwd: "/home/dev/proj"},
		Sandbox:   attest.Sandbox{Terminal: "streams", Network: "host", Seccomp: "unconfined"},
		Policy:    attest.Policy{DigestCap: 1 << 30, TimeBudget: time.Minute},
		Started:   time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
	}
	launchEnv, err := attest.SignLaunch(signer, launch)
	if err != nil {
		fmt.Println(err)
		return
	}

	sum := sha256.Sum256([]byte("hello\n"))
	launchDigest := sha256.Sum256(launchEnv)
	st := &attest.Statement{
		SessionID: launch.SessionID,
		Launch:    launchDigest[:],
		Workspace: launch.Workspace,
		Entries: []attest.Entry{
			{Path: "hello.txt", Change: attest.Added, New: &attest.State{Type: attest.File, Mode: 0o644, Size: 6, SHA256: sum[:]}},
			{Path: "old\nname", Change: attest.Deleted, Old: &attest.State{Type: attest.Dir, Mode: 0o755}},
		},
		Incomplete: []attest.Reason{{Code: attest.AgentOutlived, Detail: "1 process killed at the end of the run"}},
		Ended:      time.Date(2025, 1, 2, 3, 9, 0, 0, time.UTC),
	}
	stEnv, err := attest.SignStatement(signer, st)
	if err != nil {
		fmt.Println(err)
		return
	}

	got, err := attest.VerifyStatement(stEnv, signer.Public(), launchEnv)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("complete:", got.Complete)
	for _, r := range got.Incomplete {
		fmt.Println("incomplete:", r.Code)
	}
	for _, e := range got.Entries {
		fmt.Println(e.Change, e.Path)
	}

	stEnv[len(stEnv)/2] ^= 1
	_, err = attest.VerifyStatement(stEnv, signer.Public(), launchEnv)
	fmt.Println(errors.Is(err, attest.ErrNotVerified) || errors.Is(err, attest.ErrMalformed))
	// Output:
	// complete: false
	// incomplete: agent-outlived
	// added hello.txt
	// deleted old%0Aname
	// true
}

// Verify a session's output directory (statement, launch record and
// checkpoint chain) as `layerseal verify` does, and tell its three
// outcomes apart.
func ExampleVerifySession() {
	pub, err := attest.LoadPublicKey("seal.key.pub")
	if err != nil {
		fmt.Println(err)
		return
	}
	a, err := attest.VerifySession("run1", pub)
	switch {
	case err == nil:
		fmt.Printf("verified and complete: %d change(s), %d checkpoint(s)\n", len(a.Entries), len(a.Chain))
	case errors.Is(err, attest.ErrIncomplete):
		for _, r := range a.Incomplete() {
			fmt.Printf("incomplete: %s %s: %s\n", r.Code, r.Path, attest.Bytes(r.Detail))
		}
	default: // wraps ErrNotVerified, ErrMalformed or ErrChain, or a file error
		fmt.Println(err)
	}
}

// Sign a statement's head, prove one path changed and another did not,
// and check both bundles with the public key alone.
func ExampleProver() {
	signer, _ := attest.NewSigner(ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)))
	launchDigest := sha256.Sum256([]byte("the launch record's envelope file"))
	sum := sha256.Sum256([]byte("hello\n"))
	st := &attest.Statement{
		SessionID: "0123456789abcdef0123456789abcdef",
		Launch:    launchDigest[:],
		Workspace: "/home/dev/proj",
		Entries: []attest.Entry{
			{Path: "a.txt", Change: attest.Added, New: &attest.State{Type: attest.File, Mode: 0o644, Size: 6, SHA256: sum[:]}},
			{Path: "src/main.go", Change: attest.Added, New: &attest.State{Type: attest.File, Mode: 0o644, Size: 6, SHA256: sum[:]}},
		},
		Ended: time.Date(2025, 1, 2, 3, 9, 0, 0, time.UTC),
	}
	if _, err := attest.SignStatement(signer, st); err != nil {
		fmt.Println(err)
		return
	}
	headEnv, err := attest.SignHead(signer, attest.HeadOf(st))
	if err != nil {
		fmt.Println(err)
		return
	}
	pr, err := attest.NewProver(st, headEnv)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, p := range []attest.Path{"src/main.go", "deploy/prod.yaml"} {
		bundle, err := pr.Prove(p, false)
		if err != nil {
			fmt.Println(err)
			return
		}
		got, err := attest.VerifyBundle(bundle, signer.Public())
		switch {
		case err != nil: // ErrNotVerified, ErrMalformed, or ErrIncomplete with got
			fmt.Println(err)
		case got.Kind == attest.Inclusion:
			fmt.Println(got.Path, got.Entry.Change)
		default:
			fmt.Println(got.Path, "unchanged, between", got.Neighbours[0].Path, "and", got.Neighbours[1].Path)
		}
	}
	// Every change under src, and provably no other.
	bundle, err := pr.ProveSubtree("src", false)
	if err != nil {
		fmt.Println(err)
		return
	}
	if got, err := attest.VerifyBundle(bundle, signer.Public()); err == nil {
		for _, e := range got.Changed {
			fmt.Println("under src:", e.Path, e.Change)
		}
	}
	// Output:
	// src/main.go added
	// deploy/prod.yaml unchanged, between a.txt and src/main.go
	// under src: src/main.go added
}
