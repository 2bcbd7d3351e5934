package main

import (
	"bytes"
	"encoding/base64"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
)

// TestLogWitnessVerify: run --log (and log: in layerseal.yaml) anchors a
// run and writes its receipt; verify --log-key checks it (exit 1 when it
// is tampered with, of another head, or short of cosignatures); a witness
// cosigns and log add proves the receipt anew against its cosignature;
// log check reads the log from its directory and over HTTP; a witness
// refuses a fork of the log with exit 1, naming both sizes and roots.
func TestLogWitnessVerify(t *testing.T) {
	e := newEnv(t)
	write(t, e.ws, map[string]string{"README": "hi\n"})
	want := wantVerifyExit(t)
	logDir, logKey := filepath.Join(e.dir, "log"), filepath.Join(e.dir, "log.key")
	if got := e.cliCheck(0, "log", "init", logDir, "--key", logKey, "--origin", "test.example/log"); !strings.Contains(got, "verifier key: test.example/log+") {
		t.Fatalf("log init: %s", got)
	}
	e.cliCheck(exitFailed, "log", "init", logDir, "--key", logKey) // already a log
	// --log that is not a log: refused before the agent runs.
	if code, log := e.run(filepath.Join(e.dir, "bad"), "echo x > x", "--log", e.ws); code != exitUsage || !strings.Contains(log, "is not a log") {
		t.Fatalf("run --log of a non-log: exit %d\n%s", code, log)
	}
	out := filepath.Join(e.dir, "run1")
	if code, log := e.run(out, "echo more >> README", "--log", logDir); code != 0 || !strings.Contains(log, "anchored in log") {
		t.Fatalf("run --log: exit %d\n%s", code, log)
	}
	e.cliCheck(want, "verify", "--key", e.pub, out, "--log-key", logKey+".pub")
	// log: in layerseal.yaml.
	write(t, e.ws, map[string]string{"layerseal.yaml": "log: " + logDir + "\n"})
	out2 := filepath.Join(e.dir, "run2")
	if code, log := e.run(out2, "echo n > notes"); code != 0 || !strings.Contains(log, "anchored in log") {
		t.Fatalf("run with log: in layerseal.yaml: exit %d\n%s", code, log)
	}
	e.cliCheck(want, "verify", "--key", e.pub, out2, "--log-key", logKey+".pub")
	// A log that fails at the end of a run loses nothing: reported, and
	// log add anchors the output dir later.
	ts := filepath.Join(logDir, ".state", "treeState")
	good, _ := os.ReadFile(ts)
	os.WriteFile(ts, []byte("garbage"), 0o644)
	out3 := filepath.Join(e.dir, "run3")
	if code, log := e.run(out3, "echo z > z", "--log", logDir); code != 0 || !strings.Contains(log, "not anchored in the log") || !strings.Contains(log, "log add") {
		t.Fatalf("run --log with a broken log: exit %d\n%s", code, log)
	}
	if _, err := os.Stat(filepath.Join(out3, "statement.log-receipt.json")); err == nil {
		t.Fatal("a receipt from a broken log")
	}
	e.cliCheck(want, "verify", "--key", e.pub, filepath.Join(out3, "statement.json"))
	os.WriteFile(ts, good, 0o644)
	e.cliCheck(0, "log", "add", logDir, out3)
	e.cliCheck(want, "verify", "--key", e.pub, out3, "--log-key", logKey+".pub")
	// Tampered, or another head's receipt: exit 1.
	receipt := filepath.Join(out, "statement.log-receipt.json")
	orig, _ := os.ReadFile(receipt)
	for _, bad := range []string{
		strings.Replace(string(orig), `"index":"0"`, `"index":"1"`, 1),
		strings.Replace(string(orig), `"proof":[]`, `"proof":["`+strings.Repeat("0", 64)+`"]`, 1),
		strings.Replace(string(orig), `"format"`, `"Format"`, 1),
	} {
		os.WriteFile(receipt, []byte(bad), 0o644)
		e.cliCheck(exitFailed, "verify", "--key", e.pub, out, "--log-key", logKey+".pub")
	}
	other, _ := os.ReadFile(filepath.Join(out2, "statement.log-receipt.json"))
	os.WriteFile(receipt, other, 0o644)
	e.cliCheck(exitFailed, "verify", "--key", e.pub, out, "--log-key", logKey+".pub")
	os.WriteFile(receipt, orig, 0o644)
	// Witnesses.
	w := filepath.Join(e.dir, "w.key")
	e.cliCheck(0, "witness", "keygen", "--out", w, "--name", "test.example/witness")
	e.cliCheck(exitFailed, "verify", "--key", e.pub, out, "--log-key", logKey+".pub", "--witness-key", w+".pub", "--witnesses", "1")
	state := filepath.Join(e.dir, "w.state")
	e.cliCheck(0, "witness", "--log", logDir, "--log-key", logKey+".pub", "--key", w, "--state", state)
	e.cliCheck(0, "log", "add", logDir, out) // proven anew, now cosigned
	e.cliCheck(want, "verify", "--key", e.pub, out, "--log-key", logKey+".pub", "--witness-key", w+".pub", "--witnesses", "1")
	// log check, from the directory and over HTTP.
	if got := e.cliCheck(0, "log", "check", logDir, "--log-key", logKey+".pub", "--since", state); !strings.Contains(got, "size 3") || !strings.Contains(got, "3 head(s) signed by key") {
		t.Errorf("log check: %s", got)
	}
	if ln, err := loopback(); err != nil {
		// No loopback (a host or guest that leaves lo down): a log
		// URL that cannot be reached is exit 1.
		t.Logf("no loopback (%v): checking that an unreachable URL is exit 1", err)
		e.cliCheck(exitFailed, "log", "check", "http://127.0.0.1:9/", "--log-key", logKey+".pub")
	} else {
		srv := httptest.NewUnstartedServer(http.FileServer(http.Dir(logDir)))
		srv.Listener.Close()
		srv.Listener = ln
		srv.Start()
		defer srv.Close()
		e.cliCheck(0, "log", "check", srv.URL, "--log-key", logKey+".pub")
	}
	// A fork: another log under the same key, holding other heads.
	fork := filepath.Join(e.dir, "fork")
	e.cliCheck(0, "log", "init", fork, "--key", logKey)
	for _, o := range []string{out2, out, out3} {
		c := filepath.Join(e.dir, "copy-"+filepath.Base(o))
		os.MkdirAll(c, 0o755)
		b, _ := os.ReadFile(filepath.Join(o, "statement.head.json"))
		os.WriteFile(filepath.Join(c, "statement.head.json"), b, 0o644)
		e.cliCheck(0, "log", "add", fork, c)
	}
	before, _ := os.ReadFile(state)
	code, _, stderr := e.cli("witness", "--log", fork, "--log-key", logKey+".pub", "--key", w, "--state", state)
	if code != exitFailed || !strings.Contains(stderr, "size 3 root") || !strings.Contains(stderr, "nothing signed") {
		t.Errorf("witness over a fork: exit %d\n%s", code, stderr)
	}
	if after, _ := os.ReadFile(state); string(after) != string(before) {
		t.Error("the witness's state changed after a refusal")
	}
	e.cliCheck(exitFailed, "log", "check", fork, "--log-key", logKey+".pub", "--since", state)
}

// loopback listens on 127.0.0.1 and checks, by connecting, that the
// loopback interface is up.
func loopback() (net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 2*time.Second)
	if err != nil {
		ln.Close()
		return nil, err
	}
	c.Close()
	return ln, nil
}

// TestLogWithCheckpoints: a run anchored in a log that also took
// checkpoints (each with a log receipt beside it) verifies and exports;
// without the checkpoints its statement commits to, it does not verify.
func TestLogWithCheckpoints(t *testing.T) {
	e := newEnv(t)
	write(t, e.ws, map[string]string{"README": "hi\n"})
	logDir, logKey := filepath.Join(e.dir, "log"), filepath.Join(e.dir, "log.key")
	e.cliCheck(0, "log", "init", logDir, "--key", logKey)
	out := filepath.Join(e.dir, "run")
	if code, log := e.run(out, "echo more >> README; sleep 0.5", "--log", logDir, "--checkpoint-every", "100ms"); code != 0 {
		t.Fatalf("run --log --checkpoint-every: exit %d\n%s", code, log)
	}
	if receipts, _ := filepath.Glob(filepath.Join(out, "checkpoints", "*.log-receipt.json")); len(receipts) == 0 {
		t.Fatal("no log receipt beside the checkpoints")
	}
	if got := e.cliCheck(wantVerifyExit(t), "verify", "--key", e.pub, out); !strings.Contains(got, "checkpoint chain: ") {
		t.Errorf("verify of a run with a log and checkpoints:\n%s", got)
	}
	e.cliCheck(0, "export", out, "--out", filepath.Join(e.dir, "evidence.json"))
	// The receipt is found from the statement's file as from OUT.
	e.cliCheck(wantVerifyExit(t), "verify", "--key", e.pub, "--log-key", logKey+".pub", filepath.Join(out, "statement.json"))
	// A head that was altered is not verified, rather than of a format
	// not known.
	head := readString(t, filepath.Join(out, "statement.head.json"))
	var env struct {
		Payload []byte `json:"payload"`
	}
	if err := json.Unmarshal([]byte(head), &env, json.RejectUnknownMembers(false)); err != nil {
		t.Fatal(err)
	}
	tampered := bytes.Replace(env.Payload, []byte(`"predicate":{`), []byte(`"predicate":{"extra":"1",`), 1)
	bad := filepath.Join(e.dir, "bad.head.json")
	if err := os.WriteFile(bad, []byte(strings.Replace(head, base64.StdEncoding.EncodeToString(env.Payload), base64.StdEncoding.EncodeToString(tampered), 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := e.mustCLI(exitFailed, "verify", "--key", e.pub, bad); strings.Contains(got, "unsupported format") || !strings.Contains(got, "bad.head.json: not verified") {
		t.Errorf("verify of a head that is not strictly encoded:\n%s", got)
	}
	if err := os.Rename(filepath.Join(out, "checkpoints"), filepath.Join(e.dir, "elsewhere")); err != nil {
		t.Fatal(err)
	}
	if got := e.mustCLI(exitFailed, "verify", "--key", e.pub, filepath.Join(out, "statement.json")); !strings.Contains(got, "no checkpoints dir") {
		t.Errorf("verify without the chain the statement commits to:\n%s", got)
	}
	e.cliCheck(wantVerifyExit(t), "verify", "--key", e.pub, "--checkpoints", filepath.Join(e.dir, "elsewhere"), filepath.Join(out, "statement.json"))
}
