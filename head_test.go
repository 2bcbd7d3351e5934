package layerseal

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/layerseal/layerseal/attest"
)

// TestPrepareOutRefusesHead: an output dir holding another session's
// statement head is refused like one holding its statement, so no stale
// head lies beside a new statement.
func TestPrepareOutRefusesHead(t *testing.T) {
	for _, name := range []string{LaunchFile, StatementFile, attest.HeadFile(StatementFile), SigstoreFile} {
		out := t.TempDir()
		if _, err := prepareOut(out); err != nil {
			t.Fatalf("empty output dir: %v", err)
		}
		if err := os.WriteFile(filepath.Join(out, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := prepareOut(out); err == nil || !strings.Contains(err.Error(), "already holds "+name) {
			t.Errorf("output dir with %s: %v", name, err)
		}
	}
}
