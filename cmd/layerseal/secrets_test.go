package main

import (
	"bytes"
	"encoding/base64"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestSecretsKeptOutOfEvidence: secrets given by value (--env
// GITHUB_TOKEN=...), by name from the caller's environment (--env
// MY_API_KEY) and in a --process file under a name that looks like a
// secret's reach the agent, but no byte of them is in the output dir, the
// state dir or an export (signed payloads decoded); the launch record
// names them instead, and still holds a plain --env FOO=... and a plain
// --process value.
func TestSecretsKeptOutOfEvidence(t *testing.T) {
	e := newEnv(t)
	secrets := map[string]string{
		"GITHUB_TOKEN":     "s3cr3t-given-by-value-7f1c",
		"MY_API_KEY":       "s3cr3t-taken-from-caller-2b9d",
		"npm_config__auth": "s3cr3t-in-process-file-4e0a",
		"CALLER_PLAIN":     "not-a-secret-but-inherited-5c3e",
	}
	proc := filepath.Join(e.dir, "process.json")
	if err := os.WriteFile(proc, []byte(`{"user":{"uid":0,"gid":0},"cwd":"`+e.ws+`","env":["PATH=/usr/sbin:/usr/bin:/sbin:/bin","npm_config__auth=`+secrets["npm_config__auth"]+`","PLAIN=plain-from-process-9a8b"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(e.dir, "out")
	// The agent prints its environment: the values it got reach the
	// test's stdout, never a file of the run.
	code, stdout, stderr := e.cliEnv([]string{"MY_API_KEY=" + secrets["MY_API_KEY"], "CALLER_PLAIN=" + secrets["CALLER_PLAIN"]},
		"run", "--workspace", e.ws, "--key", e.key, "--out", out, "--state-dir", e.state, "--stage", "--process", proc,
		"--env", "GITHUB_TOKEN="+secrets["GITHUB_TOKEN"], "--env", "MY_API_KEY", "--env", "CALLER_PLAIN", "--env", "FOO=bar-recorded-6d2f",
		"--", "/bin/sh", "-c", "env; echo done > done")
	if code != 0 {
		t.Fatalf("run: exit %d\n%s%s", code, stdout, stderr)
	}
	for name, v := range secrets {
		if !strings.Contains("\n"+stdout, "\n"+name+"="+v+"\n") {
			t.Errorf("the agent did not get %s:\n%s", name, stdout)
		}
	}
	ev := filepath.Join(e.dir, "evidence.json")
	if code, _, stderr := e.cli("export", out, "--out", ev); code != 0 {
		t.Fatalf("export: exit %d: %s", code, stderr)
	}
	var launch []byte
	for _, root := range []string{out, e.state, ev} {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return err
			}
			b := evidenceBytes(t, p)
			for name, v := range secrets {
				if bytes.Contains(b, []byte(v)) {
					t.Errorf("%s holds the value of %s", p, name)
				}
			}
			if p == filepath.Join(out, "launch.json") {
				launch = b
			}
			return nil
		})
	}
	for _, want := range []string{`"FOO=bar-recorded-6d2f"`, `"PLAIN=plain-from-process-9a8b"`, `"PATH=/usr/sbin:/usr/bin:/sbin:/bin"`,
		`,"env_not_recorded":["CALLER_PLAIN","GITHUB_TOKEN","MY_API_KEY","npm_config__auth"]}`} {
		if !bytes.Contains(launch, []byte(want)) {
			t.Errorf("launch record lacks %s:\n%s", want, launch)
		}
	}
	if code, _, stderr := e.cli("verify", "--key", e.pub, out); code != wantVerifyExit(t) {
		t.Errorf("verify: exit %d, want %d: %s", code, wantVerifyExit(t), stderr)
	}
	code, stdout, stderr = e.cli("show", "--key", e.pub, filepath.Join(out, "launch.json"))
	if want := "\nenvironment not recorded (names only): \"CALLER_PLAIN\" \"GITHUB_TOKEN\" \"MY_API_KEY\" \"npm_config__auth\"\n"; code != 0 || !strings.Contains(stdout, want) {
		t.Errorf("show: exit %d, no line %q:\n%s%s", code, want, stdout, stderr)
	}
}

// base64RE matches a JSON string that may be base64: a DSSE payload, or
// an envelope within an export.
var base64RE = regexp.MustCompile(`"([A-Za-z0-9+/]{16,}={0,2})"`)

// evidenceBytes returns the bytes of file p followed by those of every
// base64 string found in it (DSSE payloads, an export's envelopes),
// decoded, and of those found in these in turn.
func evidenceBytes(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	all := bytes.Clone(b)
	for todo := [][]byte{b}; len(todo) > 0; todo = todo[1:] {
		for _, m := range base64RE.FindAllSubmatch(todo[0], -1) {
			d, err := base64.StdEncoding.DecodeString(string(m[1]))
			if err != nil {
				continue // not base64 after all
			}
			all = append(append(all, '\n'), d...)
			todo = append(todo, d)
		}
	}
	return all
}
