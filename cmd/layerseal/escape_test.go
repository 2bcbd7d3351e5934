package main

import (
	"bytes"
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/layerseal/layerseal/attest"
)

// ansi is what an agent names a directory to paint a line green over the
// real one; error text that quotes the name carries it into a reason.
const ansi = "\x1b[2K\r\x1b[32mverified: complete\x1b[0m\n\x9b31m\xff"

// TestAgentBytesEscaped: a reason whose detail holds an agent's name
// with ANSI escapes, C1 controls, a newline and invalid UTF-8 (as the
// error text of a file the walk could not read does) prints no raw
// control byte in show, verify, their --json forms, or a diagnostic.
func TestAgentBytesEscaped(t *testing.T) {
	e := newEnv(t)
	signer, err := attest.LoadPrivateKey(e.key)
	if err != nil {
		t.Fatal(err)
	}
	launch := &attest.LaunchRecord{
		SessionID: attest.NewSessionID(), Workspace: "/ws", Kernel: attest.Kernel{Release: "6.1"},
		Agent: specs.Process{Args: []string{"agent"}}, Sandbox: attest.Sandbox{Terminal: "streams", Network: "host", Seccomp: "unconfined"},
		Policy: attest.Policy{DigestCap: 1}, Started: time.Now().UTC(),
	}
	lenv, err := attest.SignLaunch(signer, launch)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(lenv)
	st := &attest.Statement{
		SessionID: launch.SessionID, Launch: sum[:], Workspace: launch.Workspace, Ended: time.Now().UTC(),
		Entries:    []attest.Entry{{Path: attest.Path("d" + strings.ReplaceAll(ansi, "\n", "")), Change: attest.Added, New: &attest.State{Type: attest.Dir, Mode: 0o755}}},
		Incomplete: []attest.Reason{{Code: attest.Unreadable, Path: "x", Detail: "upper layer: openat2 " + ansi + ": permission denied"}},
	}
	senv, err := attest.SignStatement(signer, st)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(e.dir, "art")
	os.Mkdir(dir, 0o755)
	sp, lp := filepath.Join(dir, "statement.json"), filepath.Join(dir, "launch.json")
	os.WriteFile(sp, senv, 0o644)
	os.WriteFile(lp, lenv, 0o644)
	for _, args := range [][]string{
		{"show", sp}, {"show", "--json", sp}, {"show", "--key", e.pub, sp},
		{"verify", "--key", e.pub, "--launch", lp, sp}, {"verify", "--json", "--key", e.pub, "--launch", lp, sp},
	} {
		code, so, se := e.cli(args...)
		if code != exitOK && code != exitIncomplete {
			t.Fatalf("%v: exit %d\n%s%s", args, code, so, se)
		}
		out := so + se
		if strings.ContainsAny(out, "\x1b\r\u009b") || !strings.Contains(out, "%1B") || !strings.Contains(out, "%FF") {
			t.Errorf("%v prints raw control bytes or drops them: %q", args, out)
		}
	}
	var b bytes.Buffer
	escapingWriter{&b}.Write([]byte("layerseal: workspace overlay on \"" + ansi + "\" was unmounted\n"))
	if strings.ContainsAny(b.String(), "\x1b\r\u009b") || strings.Count(b.String(), "\n") != 2 {
		t.Errorf("diagnostic not escaped: %q", b.String())
	}
}
