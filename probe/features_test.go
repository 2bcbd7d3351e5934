package probe

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"testing"
)

// sample has every kind of item: yes, no, unknown, a parameter value that
// must be quoted, a note and a simulation.
func sample() Features {
	return Features{
		KernelRelease:      "6.18.0-test",
		StatxMountID:       Finding{Status: Yes, Detail: "statx mask"},
		StatxMountIDUnique: Finding{Status: No, Detail: "not in statx mask"},
		Openat2:            Finding{Status: No, Detail: "ENOSYS"},
		LandlockScope:      Finding{Status: No, Detail: "Landlock ABI 4; scopes need ABI 6, Linux 6.12"},
		Seccomp:            Finding{Status: Yes, Detail: "SECCOMP_GET_ACTION_AVAIL"},
		Overlay:            Finding{Status: Yes, Detail: "trial mount"},
		OverlayOptions: []OptionFinding{
			{Option: "index=off", Finding: Finding{Status: Yes, Detail: "trial mount"}},
			{Option: "uuid=null", Finding: Finding{Status: No, Detail: "EINVAL"}},
		},
		OverlayPinned:     Finding{Status: No, Detail: "EINVAL"},
		UserXattr:         Finding{Status: Unknown, Detail: "needs root"},
		OverlayParams:     map[string]string{"redirect_max": "256", "index": "N", "odd": "a\tb"},
		OverlayParamsNote: "unreadable: secret: EACCES",
		Simulated:         []string{"no-openat2"},
	}
}

func TestWriteText(t *testing.T) {
	var b bytes.Buffer
	if err := sample().WriteText(&b); err != nil {
		t.Fatal(err)
	}
	want := `kernel release             6.18.0-test
statx STATX_MNT_ID         yes (statx mask)
statx STATX_MNT_ID_UNIQUE  no (not in statx mask)
openat2                    no (ENOSYS)
landlock scopes            no (Landlock ABI 4; scopes need ABI 6, Linux 6.12)
seccomp filters            yes (SECCOMP_GET_ACTION_AVAIL)
overlay                    yes (trial mount)
overlay index=off          yes (trial mount)
overlay uuid=null          no (EINVAL)
overlay pinned options     no (EINVAL)
overlay userxattr          unknown (needs root)
overlay module parameters  from /sys/module/overlay/parameters (unreadable: secret: EACCES)
  index                    N
  odd                      "a\tb"
  redirect_max             256
simulated                  no-openat2
`
	if got := b.String(); got != want {
		t.Errorf("WriteText:\n%s\nwant:\n%s", got, want)
	}
}

func TestWriteTextNoParams(t *testing.T) {
	f := sample()
	f.OverlayParams, f.OverlayParamsNote, f.Simulated = nil, "overlay module not loaded", nil
	var b bytes.Buffer
	if err := f.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(b.Bytes(), []byte("\n")), []byte("\n"))
	last := string(lines[len(lines)-1])
	if want := "overlay module parameters  none (overlay module not loaded)"; last != want {
		t.Errorf("last line %q, want %q", last, want)
	}
}

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"plain text": "plain text",
		"tab\there":  `"tab\there"`,
		"new\nline":  `"new\nline"`,
		"\xff":       `"\xff"`,
		"":           "",
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestJSON(t *testing.T) {
	f := sample()
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		t.Fatal(err)
	}
	want := []string{"kernel_release", "landlock_scope", "openat2", "overlay", "overlay_options", "overlay_params",
		"overlay_params_note", "overlay_pinned", "seccomp", "simulated", "statx_mnt_id", "statx_mnt_id_unique", "userxattr"}
	var got []string
	for k := range keys {
		got = append(got, k)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("JSON keys %q, want %q", got, want)
	}
	var back Features
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, f) {
		t.Errorf("round trip:\n%+v\nwant\n%+v", back, f)
	}
}

func TestStatusRejectsUnknownValue(t *testing.T) {
	var fd Finding
	if err := json.Unmarshal([]byte(`{"status":"maybe","detail":""}`), &fd); err == nil {
		t.Errorf("status \"maybe\" decoded as %q", fd.Status)
	}
	if err := json.Unmarshal([]byte(`{"status":"unknown","detail":"needs root"}`), &fd); err != nil || fd.Status != Unknown {
		t.Errorf("status \"unknown\": %v, %q", err, fd.Status)
	}
}

func TestOption(t *testing.T) {
	f := sample()
	if got := f.Option("uuid=null"); got != (Finding{Status: No, Detail: "EINVAL"}) {
		t.Errorf("Option(uuid=null) = %+v", got)
	}
	if got := f.Option("xino=off"); got.Status != Unknown {
		t.Errorf("Option of an untried option = %+v, want unknown", got)
	}
}
