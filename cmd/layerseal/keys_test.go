package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/layerseal/layerseal/attest"
)

// TestKeygenAlgorithms: keygen makes a key of each algorithm, prints its
// ID naming the algorithm, and refuses an unknown one by name.
func TestKeygenAlgorithms(t *testing.T) {
	e := &env{t: t, dir: t.TempDir()}
	for _, alg := range attest.Algorithms() {
		key := filepath.Join(e.dir, alg+".key")
		out := e.cliCheck(0, "keygen", "--alg", alg, "--out", key)
		pub, err := attest.LoadPublicKey(key + ".pub")
		if err != nil {
			t.Fatalf("%s: %v", alg, err)
		}
		if pub.Alg() != alg || !strings.Contains(out, "key id:      "+alg+":") || !strings.Contains(out, pub.KeyID()) {
			t.Errorf("keygen --alg %s printed:\n%s", alg, out)
		}
		// The private key where the public one goes is named as such.
		code, stdout, stderr := e.cli("verify", "--key", key, filepath.Join(e.dir, "statement.json"))
		if code != exitUsage || !strings.Contains(stderr, "is a private key: give its public key") {
			t.Errorf("verify --key %s: exit %d\n%s%s", filepath.Base(key), code, stdout, stderr)
		}
	}
	e.cliCheck(0, "keygen", "--out", filepath.Join(e.dir, "default.key"))
	if pub, err := attest.LoadPublicKey(filepath.Join(e.dir, "default.key.pub")); err != nil || pub.Alg() != attest.AlgEd25519 {
		t.Errorf("keygen without --alg: %v, %v", pub.Alg(), err)
	}
	code, stdout, stderr := e.cli("keygen", "--alg", "ml-dsa-44", "--out", filepath.Join(e.dir, "bad.key"))
	if code != exitUsage || !strings.Contains(stderr, `"ml-dsa-44"`) || !strings.Contains(stderr, "ed25519, ml-dsa-65, hybrid") {
		t.Errorf("keygen --alg ml-dsa-44: exit %d\n%s%s", code, stdout, stderr)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "bad.key")); !os.IsNotExist(err) {
		t.Errorf("keygen with a bad --alg wrote a key: %v", err)
	}
	code, stdout, stderr = e.cli("keygen", "--help")
	for _, alg := range attest.Algorithms() {
		if code != 0 || !strings.Contains(stderr+stdout, alg) {
			t.Errorf("keygen --help does not name %s", alg)
		}
	}
}

// TestRunEachAlgorithm runs an agent with a key of each algorithm, staged:
// every artifact (launch record, checkpoints, statement, heads, a proof
// bundle) verifies with its public key and with no key of another
// algorithm; apply checks the statement with the key the session record
// pinned.
func TestRunEachAlgorithm(t *testing.T) {
	e := newEnv(t)
	write(t, e.ws, map[string]string{"README": "hi\n", "src/main.go": "package main\n"})
	want := wantVerifyExit(t)
	pubs := map[string]string{}
	for _, alg := range attest.Algorithms() {
		key := filepath.Join(e.dir, alg+".key")
		e.cliCheck(0, "keygen", "--alg", alg, "--out", key)
		pubs[alg] = key + ".pub"
	}
	for _, alg := range attest.Algorithms() {
		t.Run(alg, func(t *testing.T) {
			e.t = t
			e.key, e.pub = strings.TrimSuffix(pubs[alg], ".pub"), pubs[alg]
			out := filepath.Join(e.dir, "out-"+alg)
			if code, log := e.run(out, "echo "+alg+" >> src/main.go; echo n > notes; sleep 0.5", "--stage", "--checkpoint-every", "100ms"); code != 0 {
				t.Fatalf("run: exit %d\n%s", code, log)
			}
			cps, _ := filepath.Glob(filepath.Join(out, "checkpoints", "0*[0-9].json"))
			if len(cps) == 0 {
				t.Fatal("no checkpoint")
			}
			bundle := filepath.Join(e.dir, alg+".bundle.json")
			e.cliCheck(0, "prove", out, "src/main.go", "--out", bundle)
			files := []string{filepath.Join(out, "statement.json"), filepath.Join(out, "statement.head.json"),
				filepath.Join(out, "launch.json"), cps[0], filepath.Join(filepath.Dir(cps[0]), attest.HeadFile(filepath.Base(cps[0]))), bundle}
			checkpoint := map[string]bool{cps[0]: true, files[4]: true}
			for _, f := range files {
				code, _, _ := e.cli("verify", "--key", e.pub, f)
				// A checkpoint taken while the agent writes may say
				// incomplete (unstable): verified all the same.
				if code != want && code != exitOK && !(checkpoint[f] && code == exitIncomplete) {
					t.Errorf("verify %s: exit %d", filepath.Base(f), code)
				}
				for other, pub := range pubs {
					if other == alg {
						continue
					}
					code, stdout, stderr := e.cli("verify", "--key", pub, f)
					if code != exitFailed {
						t.Errorf("verify %s signed with %s under a %s key: exit %d\n%s%s", filepath.Base(f), alg, other, code, stdout, stderr)
					}
				}
			}
			env, err := os.ReadFile(filepath.Join(out, "statement.json"))
			if err != nil {
				t.Fatal(err)
			}
			if id, err := attest.SignerKeyID(env); err != nil || !strings.HasPrefix(id, alg+":") {
				t.Errorf("statement signed by %q (%v)", id, err)
			}
			e.cliCheck(0, "apply", "--state-dir", e.state, out)
			if got := readString(t, filepath.Join(e.ws, "src/main.go")); !strings.HasSuffix(got, alg+"\n") {
				t.Errorf("src/main.go after apply: %q", got)
			}
		})
	}
}

// TestKeyLinkedRefused: run refuses a signing key with a second name (a
// hard link, which masking --key does not hide from the agent), before
// the agent starts, and says what to do; with the other name removed, the
// key signs.
func TestKeyLinkedRefused(t *testing.T) {
	e := newEnv(t)
	write(t, e.ws, map[string]string{"README": "hi\n"})
	other := filepath.Join(e.ws, "copy-of-key")
	if err := os.Link(e.key, other); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(e.dir, "out")
	code, log := e.run(out, "cat copy-of-key > stolen")
	if code != exitSetup || !strings.Contains(log, "2 names (hard links)") || !strings.Contains(log, "remove the other links") {
		t.Fatalf("run with a key of 2 names: exit %d\n%s", code, log)
	}
	if _, err := os.Stat(filepath.Join(out, "statement.json")); !os.IsNotExist(err) {
		t.Errorf("a refused key left a statement: %v", err)
	}
	if err := os.Remove(other); err != nil {
		t.Fatal(err)
	}
	if code, log := e.run(out, "echo ok > notes"); code != 0 {
		t.Fatalf("run with the key's one name: exit %d\n%s", code, log)
	}
}
