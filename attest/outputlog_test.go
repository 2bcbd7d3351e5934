package attest

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestOutputLogsRoundTrip: the logs survive signing and verification, and
// the payload holds them in the documented form.
func TestOutputLogsRoundTrip(t *testing.T) {
	s := testSigner(t, 1)
	launchEnv, stEnv := signedPair(t, s)
	st, err := VerifyStatement(stEnv, s.Public(), launchEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := sampleStatement(launchEnv, session1).Logs
	if !reflect.DeepEqual(st.Logs, want) {
		t.Fatalf("logs %+v, want %+v", st.Logs, want)
	}
	wantJSON := `"logs":[{"name":"stderr","size":"0","sha256":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},` +
		`{"name":"stdout","size":"6","sha256":"5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03","truncated":true}]}`
	if p := payloadOf(t, stEnv); !bytes.HasSuffix(p, []byte(wantJSON+"}")) {
		t.Fatalf("payload does not end with the logs member as documented:\n%s", p)
	}

	// A statement without logs has no logs member.
	none := sampleStatement(launchEnv, session1)
	none.Logs = nil
	env, err := SignStatement(s, none)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(payloadOf(t, env), []byte(`"logs"`)) {
		t.Fatal("a statement without logs has a logs member")
	}
	if got, err := VerifyStatement(env, s.Public(), launchEnv); err != nil || got.Logs != nil {
		t.Fatalf("no logs: got %v, %v", got.Logs, err)
	}
}

// TestOutputLogsStrict: a re-signed statement whose logs member is not in
// its one valid form is malformed.
func TestOutputLogsStrict(t *testing.T) {
	s := testSigner(t, 1)
	launchEnv, stEnv := signedPair(t, s)
	payload := string(payloadOf(t, stEnv))
	const stderrLog = `{"name":"stderr","size":"0","sha256":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}`
	for name, edit := range map[string][2]string{
		"unknown member":       {`"truncated":true}`, `"truncated":true,"lines":"1"}`},
		"duplicate member":     {`"name":"stderr",`, `"name":"stderr","name":"stderr",`},
		"case variant":         {`{"name":"stderr"`, `{"Name":"stderr"`},
		"case variant of logs": {`"logs":`, `"Logs":`},
		"unknown name":         {`"name":"stderr"`, `"name":"stdin"`},
		"path as name":         {`"name":"stderr"`, `"name":"../stderr"`},
		"duplicate log":        {stderrLog, stderrLog + "," + stderrLog},
		"unsorted":             {stderrLog + ",", ""},
		"truncated false":      {`"truncated":true`, `"truncated":false`},
		"upper-case digest":    {"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855"},
		"short digest":         {"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "e3b0"},
		"numeric size":         {`"size":"6"`, `"size":6`},
		"empty logs":           {`"logs":[` + stderrLog + `,`, `"logs":[],"x":[`},
	} {
		if !strings.Contains(payload, edit[0]) {
			t.Fatalf("%s: %q not in the payload", name, edit[0])
		}
		p := strings.Replace(payload, edit[0], edit[1], 1)
		if name == "unsorted" {
			p = strings.Replace(p, `"truncated":true}`, `"truncated":true},`+stderrLog, 1)
		}
		if name == "empty logs" {
			p = strings.Replace(payload, `"logs":[`+stderrLog+`,{"name":"stdout","size":"6","sha256":"5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03","truncated":true}]`, `"logs":[]`, 1)
		}
		if p == payload {
			t.Fatalf("%s: no change", name)
		}
		if _, err := VerifyStatement(reseal(t, s, []byte(p)), s.Public(), launchEnv); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want ErrMalformed", name, err)
		}
	}
}

func TestOutputLogCheck(t *testing.T) {
	l := OutputLog{Name: StdoutLog, Size: 6, SHA256: digest("hello\n")}
	if err := l.Check(strings.NewReader("hello\n")); err != nil {
		t.Fatalf("the logged bytes: %v", err)
	}
	for _, bad := range []string{"", "hello", "hello\n\n", "jello\n", "hello\nworld\n"} {
		if err := l.Check(strings.NewReader(bad)); !errors.Is(err, ErrNotVerified) || !strings.Contains(err.Error(), `"stdout"`) {
			t.Errorf("log %q: got %v, want ErrNotVerified naming the log", bad, err)
		}
	}
	readErr := errors.New("disk gone")
	if err := l.Check(failingReader{readErr}); !errors.Is(err, readErr) || errors.Is(err, ErrNotVerified) {
		t.Errorf("failing reader: got %v", err)
	}
}

type failingReader struct{ err error }

func (r failingReader) Read([]byte) (int, error) { return 0, r.err }
