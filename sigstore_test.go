package layerseal

// These tests check layerseal's statements with Sigstore's own verifier
// (sigstore-go), configured the way `cosign verify-blob-attestation --key
// KEY.pub --insecure-ignore-tlog --type https://layerseal.dev/statement/v1`
// configures it: the public key read from its PEM file as cosign reads it,
// trusted with no validity window, no transparency log, no timestamps, a
// key (not certificate) policy, and the file given checked against the
// subjects' digests. sigstore-go is a test dependency only.

import (
	"bytes"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/tlog"
	"github.com/sigstore/sigstore-go/pkg/verify"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/atomicfile"
	"github.com/layerseal/layerseal/internal/privtest"
	"github.com/layerseal/layerseal/nsrun"
)

// keyMaterial is the trusted material of a public key file: the key, as
// cosign loads it from --key, under its key ID alone.
func keyMaterial(t *testing.T, pubPath string) root.TrustedMaterial {
	t.Helper()
	pemBytes, err := os.ReadFile(pubPath)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := cryptoutils.UnmarshalPEMToPublicKey(pemBytes)
	if err != nil {
		t.Fatal(err)
	}
	v, err := signature.LoadVerifier(pub, crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(der)
	keyID := fmt.Sprintf("ed25519:%x", sum) // layerseal's key id: algorithm, then the SHA-256 of the PKIX DER
	key := root.NewExpiringKey(v, time.Time{}, time.Time{})
	return root.NewTrustedPublicKeyMaterial(func(hint string) (root.TimeConstrainedVerifier, error) {
		if hint != keyID {
			return nil, fmt.Errorf("no key with hint %q", hint)
		}
		return key, nil
	})
}

// keyHint is the verification content of an envelope checked with a key:
// the key named by the envelope's key ID.
type keyHint string

func (h keyHint) CompareKey(key any, tm root.TrustedMaterial) bool {
	v, err := tm.PublicKeyVerifier(string(h))
	if err != nil {
		return false
	}
	pub, err := v.PublicKey()
	if err != nil {
		return false
	}
	k, ok := key.(interface{ Equal(crypto.PublicKey) bool })
	return ok && k.Equal(pub)
}

func (h keyHint) ValidAtTime(t time.Time, tm root.TrustedMaterial) bool {
	v, err := tm.PublicKeyVerifier(string(h))
	return err == nil && v.ValidAtTime(t)
}

func (keyHint) Certificate() *x509.Certificate        { return nil }
func (keyHint) Intermediates() []*x509.Certificate    { return nil }
func (h keyHint) PublicKey() verify.PublicKeyProvider { return h }
func (h keyHint) Hint() string                        { return string(h) }

// envelopeEntity is what `--signature FILE` gives cosign: a DSSE envelope
// file, read as cosign reads it (encoding/json into DSSE's own type), with
// no transparency log entry and no timestamp, checked with the --key key.
//
// cosign checks such an envelope with DSSE's verifier given no public key,
// so the envelope's key ID is never compared with anything; sigstore-go
// gives it the key, and then skips a signature whose key ID is not the
// key's SSH fingerprint. The key ID is the one thing the signature does
// not cover: readEnvelope clears it, which makes sigstore-go check what
// cosign checks. (The Sigstore bundle leaves it out for the same reason.)
type envelopeEntity struct {
	verify.BaseSignedEntity
	env *dsse.Envelope
	// keyID is the key ID the file named, the key trusted for it.
	keyID string
}

func readEnvelope(t *testing.T, path string) *envelopeEntity {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var env dsse.Envelope
	if err := json.Unmarshal(b, &env); err != nil {
		t.Fatalf("%s is not a DSSE envelope: %v", path, err)
	}
	if len(env.Signatures) != 1 {
		t.Fatalf("%s has %d signatures", path, len(env.Signatures))
	}
	keyID := env.Signatures[0].KeyID
	env.Signatures[0].KeyID = ""
	return &envelopeEntity{env: &env, keyID: keyID}
}

func (e *envelopeEntity) SignatureContent() (verify.SignatureContent, error) {
	return &bundle.Envelope{Envelope: e.env}, nil
}

func (e *envelopeEntity) VerificationContent() (verify.VerificationContent, error) {
	return keyHint(e.keyID), nil
}

func (e *envelopeEntity) Version() (string, error)            { return "v0.3", nil }
func (e *envelopeEntity) TlogEntries() ([]*tlog.Entry, error) { return nil, nil }
func (e *envelopeEntity) Timestamps() ([][]byte, error)       { return nil, nil }

// sigstoreVerify checks entity with the key trusted in tm and artifact
// (a file's content) against its subjects, and its predicate type, as
// cosign verify-blob-attestation --insecure-ignore-tlog does.
func sigstoreVerify(tm root.TrustedMaterial, entity verify.SignedEntity, artifact []byte) error {
	v, err := verify.NewVerifier(tm, verify.WithNoObserverTimestamps())
	if err != nil {
		return err
	}
	res, err := v.Verify(entity, verify.NewPolicy(verify.WithArtifact(bytes.NewReader(artifact)), verify.WithKey()))
	if err != nil {
		return err
	}
	if res.Statement == nil || res.Statement.PredicateType != attest.StatementPredicateType {
		return fmt.Errorf("predicate type %v, want %s", res.Statement, attest.StatementPredicateType)
	}
	return nil
}

// sigstoreSession signs a statement of files (path → content) with a key
// written by GenerateKey into dir, and writes it as OUT/statement.json.
func sigstoreSession(t *testing.T, dir string, files map[attest.Path]string) (key *attest.Signer, pubPath, out string) {
	t.Helper()
	key, pubPath = keyPair(t, dir)
	launch := &attest.LaunchRecord{SessionID: attest.NewSessionID(), Workspace: "/ws", Kernel: attest.Kernel{Release: "6.1"},
		Agent: specs.Process{Args: []string{"a"}}, Sandbox: attest.Sandbox{Terminal: "streams", Network: "host", Seccomp: "unconfined"},
		Policy: attest.Policy{DigestCap: 1 << 20}, Started: time.Now().UTC()}
	lenv, err := attest.SignLaunch(key, launch)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(lenv)
	st := &attest.Statement{SessionID: launch.SessionID, Launch: sum[:], Workspace: "/ws", Ended: time.Now().UTC()}
	for _, p := range slices.Sorted(maps.Keys(files)) {
		d := sha256.Sum256([]byte(files[p]))
		st.Entries = append(st.Entries, attest.Entry{Path: p, Change: attest.Added,
			New: &attest.State{Type: attest.File, Mode: 0o644, Size: uint64(len(files[p])), SHA256: d[:]}})
	}
	env, err := attest.SignStatement(key, st)
	if err != nil {
		t.Fatal(err)
	}
	out = filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, StatementFile), env, 0o644); err != nil {
		t.Fatal(err)
	}
	return key, pubPath, out
}

// keyPair makes a key pair in dir as `layerseal keygen` does (PEM files,
// the public one as cosign reads --key) and loads the private key.
func keyPair(t *testing.T, dir string) (key *attest.Signer, pubPath string) {
	t.Helper()
	privPath, pubPath := filepath.Join(dir, "seal.key"), filepath.Join(dir, "seal.key.pub")
	if _, err := attest.GenerateKey(attest.AlgEd25519, privPath, pubPath); err != nil {
		t.Fatal(err)
	}
	key, err := attest.LoadPrivateKey(privPath)
	if err != nil {
		t.Fatal(err)
	}
	return key, pubPath
}

// sigstoreFiles are an agent's files: two with subjects and one whose
// name (a newline) no in-toto name carries.
var sigstoreFiles = map[attest.Path]string{
	"src/main.go": "package main\n",
	"README.md":   "# hello\n",
	"odd\nname":   "odd content\n",
}

// TestSigstoreVerifiesStatement: Sigstore's verifier accepts
// OUT/statement.json with the public key for each file the agent wrote
// (the `cosign verify-blob-attestation --signature` check), and refuses
// other content, a file without a subject, another key and a changed
// envelope.
func TestSigstoreVerifiesStatement(t *testing.T) {
	dir := t.TempDir()
	_, pubPath, out := sigstoreSession(t, dir, sigstoreFiles)
	tm := keyMaterial(t, pubPath)
	stPath := filepath.Join(out, StatementFile)
	for _, p := range []attest.Path{"src/main.go", "README.md"} {
		if err := sigstoreVerify(tm, readEnvelope(t, stPath), []byte(sigstoreFiles[p])); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	for name, content := range map[string]string{
		"other content":          "package main\n// changed\n",
		"empty":                  "",
		"a file with no subject": sigstoreFiles["odd\nname"],
	} {
		if err := sigstoreVerify(tm, readEnvelope(t, stPath), []byte(content)); err == nil {
			t.Errorf("%s: verified", name)
		}
	}

	_, otherPub := keyPair(t, t.TempDir())
	if err := sigstoreVerify(keyMaterial(t, otherPub), readEnvelope(t, stPath), []byte(sigstoreFiles["README.md"])); err == nil {
		t.Error("verified with another key")
	}

	e := readEnvelope(t, stPath)
	e.env.Payload = e.env.Payload[:len(e.env.Payload)-4] + "AAA="
	if err := sigstoreVerify(tm, e, []byte(sigstoreFiles["README.md"])); err == nil {
		t.Error("verified a changed payload")
	}
}

// loadBundle reads a Sigstore bundle file with sigstore-go's loader, which
// cosign uses for --bundle.
func loadBundle(t *testing.T, path string) *bundle.Bundle {
	t.Helper()
	b, err := bundle.LoadJSONFromPath(path)
	if err != nil {
		t.Fatalf("load %s: %v", path, err)
	}
	return b
}

// TestSigstoreBundle: OUT/statement.sigstore.json is a v0.3 bundle that
// Sigstore's loader reads and its verifier accepts with the key named by
// its hint for each file the agent wrote (the `cosign
// verify-blob-attestation --bundle` check), and refuses for other content,
// another key, another hint and a changed payload.
func TestSigstoreBundle(t *testing.T) {
	dir := t.TempDir()
	key, pubPath, out := sigstoreSession(t, dir, sigstoreFiles)
	env, err := os.ReadFile(filepath.Join(out, StatementFile))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(out, SigstoreFile)
	if err := writeSigstore(key, env, path, atomicfile.Write); err != nil {
		t.Fatal(err)
	}
	b := loadBundle(t, path)
	if v, err := b.Version(); err != nil || v != "v0.3" || b.MediaType != attest.SigstoreMediaType {
		t.Errorf("bundle version %q (%v), media type %q", v, err, b.MediaType)
	}
	vc, err := b.VerificationContent()
	if err != nil || vc.PublicKey() == nil || vc.PublicKey().Hint() != key.KeyID() {
		t.Fatalf("verification content %v (%v), want the hint %s", vc, err, key.KeyID())
	}
	tm := keyMaterial(t, pubPath)
	for _, p := range []attest.Path{"src/main.go", "README.md"} {
		if err := sigstoreVerify(tm, loadBundle(t, path), []byte(sigstoreFiles[p])); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if err := sigstoreVerify(tm, loadBundle(t, path), []byte("# hello, changed\n")); err == nil {
		t.Error("other content verified")
	}
	_, otherPub := keyPair(t, t.TempDir())
	if err := sigstoreVerify(keyMaterial(t, otherPub), loadBundle(t, path), []byte(sigstoreFiles["README.md"])); err == nil {
		t.Error("verified with another key")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func([]byte) []byte{
		"another hint": func(b []byte) []byte {
			return bytes.Replace(b, []byte(key.KeyID()), []byte(fmt.Sprintf("%064x", 1)), 1)
		},
		"another payload": func(b []byte) []byte {
			i := bytes.Index(b, []byte(`"payload":"`)) + len(`"payload":"`) + 8
			c := bytes.Clone(b)
			c[i] ^= 'A' ^ 'B'
			return c
		},
	} {
		p := filepath.Join(t.TempDir(), "b.json")
		if err := os.WriteFile(p, f(raw), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := sigstoreVerify(tm, loadBundle(t, p), []byte(sigstoreFiles["README.md"])); err == nil {
			t.Errorf("%s: verified", name)
		}
	}

	// A bundle that cannot be written is reported, and the statement is
	// as it was.
	err = writeSigstore(key, env, path, func(string, []byte, os.FileMode) error { return os.ErrPermission })
	if !errors.Is(err, ErrSigstoreNotWritten) {
		t.Errorf("failed write: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(out, StatementFile)); err != nil || !bytes.Equal(got, env) {
		t.Errorf("statement after a failed bundle: %v", err)
	}
}

// TestRunWritesSigstore: a run writes OUT/statement.sigstore.json beside
// OUT/statement.json; Sigstore's verifier accepts both for a file the
// agent wrote, as it lies in the workspace after the run, and refuses
// them for the file the agent changed back to other content, and for a
// file whose name no subject can carry (it is in the signed list all the
// same).
func TestRunWritesSigstore(t *testing.T) {
	privtest.Require(t)
	dir := t.TempDir()
	ws, out := filepath.Join(dir, "ws"), filepath.Join(dir, "out")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "kept.txt"), []byte("before\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	key, pubPath := keyPair(t, dir)
	script := `printf 'made by the agent\n' > made.txt; printf 'after\n' > kept.txt; printf 'odd\n' > "$(printf 'odd\nname')"`
	res, err := Run(RunConfig{Workspace: ws, Key: key, Out: out, StateDir: filepath.Join(dir, "state"),
		Process: DefaultProcess([]string{"/bin/sh", "-ec", script}, 0, 0, "host"),
		Sandbox: nsrun.Sandbox{Network: "host", Seccomp: "unconfined"}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Applied || len(res.Statement.Entries) < 3 {
		t.Fatalf("applied %t, %d entries", res.Applied, len(res.Statement.Entries))
	}
	if subs := attest.StatementSubjects(res.Statement.Root, res.Statement.Entries); len(subs) != 3 {
		t.Errorf("subjects %q, want the root, kept.txt and made.txt", subs)
	}
	tm := keyMaterial(t, pubPath)
	entities := map[string]func() verify.SignedEntity{
		StatementFile: func() verify.SignedEntity { return readEnvelope(t, filepath.Join(out, StatementFile)) },
		SigstoreFile:  func() verify.SignedEntity { return loadBundle(t, filepath.Join(out, SigstoreFile)) },
	}
	for file, entity := range entities {
		for _, name := range []string{"made.txt", "kept.txt"} {
			content, err := os.ReadFile(filepath.Join(ws, name))
			if err != nil {
				t.Fatal(err)
			}
			if err := sigstoreVerify(tm, entity(), content); err != nil {
				t.Errorf("%s, %s: %v", file, name, err)
			}
		}
		for _, content := range []string{"before\n", "odd\n", "made by someone else\n"} {
			if err := sigstoreVerify(tm, entity(), []byte(content)); err == nil {
				t.Errorf("%s: %q verified", file, content)
			}
		}
	}
}

// TestSigstoreSubjectCap: a statement of more files than subjects (3,000)
// carries MaxSubjects subjects, which Sigstore's verifier still reads: it
// verifies the last file with a subject and refuses the first one past
// the cap.
func TestSigstoreSubjectCap(t *testing.T) {
	files := map[attest.Path]string{}
	for i := range 3000 {
		files[attest.Path(fmt.Sprintf("f%04d", i))] = fmt.Sprintf("content %d\n", i)
	}
	dir := t.TempDir()
	_, pubPath, out := sigstoreSession(t, dir, files)
	tm := keyMaterial(t, pubPath)
	stPath := filepath.Join(out, StatementFile)
	last := fmt.Sprintf("content %d\n", attest.MaxSubjects-2)
	if err := sigstoreVerify(tm, readEnvelope(t, stPath), []byte(last)); err != nil {
		t.Errorf("the last file with a subject: %v", err)
	}
	past := fmt.Sprintf("content %d\n", attest.MaxSubjects-1)
	if err := sigstoreVerify(tm, readEnvelope(t, stPath), []byte(past)); err == nil {
		t.Error("the first file past the cap verified")
	}
}
