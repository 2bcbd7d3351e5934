package attest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadPrivateKeyLinked: a private key with a second name (a hard link
// an agent might read) is refused by either name, with ErrKeyLinked and a
// message that says what to do; once the other name is gone, and after the
// cp && mv the message suggests, it loads. A public key may have links.
func TestLoadPrivateKeyLinked(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "k")
	if _, err := GenerateKey(AlgEd25519, key, key+".pub"); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPrivateKey(key); err != nil {
		t.Fatalf("key with one name refused: %v", err)
	}
	other := filepath.Join(dir, "agent-readable")
	if err := os.Link(key, other); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{key, other} {
		_, err := LoadPrivateKey(p)
		if !errors.Is(err, ErrKeyLinked) {
			t.Fatalf("LoadPrivateKey(%s) with 2 names: %v, want ErrKeyLinked", filepath.Base(p), err)
		}
		for _, want := range []string{"2 names (hard links)", "cp " + `"` + p + `" "` + p + `.new"`, "remove the other links"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q lacks %q", err, want)
			}
		}
	}
	// A third name: the count is the file's, not a guess.
	third := filepath.Join(dir, "third")
	if err := os.Link(key, third); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPrivateKey(key); err == nil || !strings.Contains(err.Error(), "3 names") {
		t.Errorf("3 names: %v", err)
	}
	if err := os.Remove(third); err != nil {
		t.Fatal(err)
	}
	// The remedy the message gives: a copy under the key's name.
	data, err := os.ReadFile(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key+".new", data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(key+".new", key); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPrivateKey(key); err != nil {
		t.Errorf("key copied to a new file refused: %v", err)
	}
	if _, err := LoadPrivateKey(other); err != nil {
		t.Errorf("the old file, now with one name: %v", err)
	}
	// Public keys are not secret.
	if err := os.Link(key+".pub", filepath.Join(dir, "pub-copy")); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPublicKey(key + ".pub"); err != nil {
		t.Errorf("public key with 2 names refused: %v", err)
	}
}
