package attest

import (
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// subjectEntries has one entry of each kind that does or does not get a
// file subject.
func subjectEntries() []Entry {
	file := func(d string) *State { return &State{Type: File, Mode: 0o644, Size: 1, SHA256: digest(d)} }
	return []Entry{
		{Path: "100%.txt", Change: Added, New: file("percent")},
		{Path: "a.go", Change: Added, New: file("a")},
		{Path: "b.go", Change: Modified, Old: file("b0"), New: file("b1")},
		{Path: "big.bin", Change: Added, New: &State{Type: File, Mode: 0o644, Size: 1 << 40}}, // over the digest cap
		{Path: "dir", Change: Added, New: &State{Type: Dir, Mode: 0o755}},
		{Path: "gone.go", Change: Deleted, Old: file("gone")},
		{Path: "link", Change: Added, New: &State{Type: Symlink, Mode: 0o777, Size: 4, Target: "a.go"}},
		{Path: "mode.sh", Change: Metadata, Old: file("m"), New: &State{Type: File, Mode: 0o755, Size: 1, SHA256: digest("m")}},
		{Path: "new\nline", Change: Added, New: file("nl")},
		{Path: "now-a-file", Change: TypeChange, Old: &State{Type: Symlink, Mode: 0o777, Size: 1, Target: "x"}, New: file("tc")},
		{Path: "rtl\u202egnp.exe", Change: Added, New: file("rtl")},
		{Path: "src/ファイル.txt", Change: Added, New: file("jp")},
		{Path: "\xffbad", Change: Added, New: file("bad")},
	}
}

func hexDigest(s string) string { return hex.EncodeToString(digest(s)) }

// TestStatementSubjects: the root subject first, then exactly the added,
// modified and typechanged regular files with a digest whose path is its
// own text form, in path order.
func TestStatementSubjects(t *testing.T) {
	root := digest("root")
	got := StatementSubjects(root, subjectEntries())
	want := []Subject{
		{StatementSubject, hex.EncodeToString(root)},
		{"a.go", hexDigest("a")},
		{"b.go", hexDigest("b1")},
		{"now-a-file", hexDigest("tc")},
		{"src/ファイル.txt", hexDigest("jp")},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("subjects:\n got %q\nwant %q", got, want)
	}
}

// signSubjects signs a statement of entries and returns its envelope and
// launch record.
func signSubjects(t *testing.T, s *Signer, entries []Entry) (stEnv, launchEnv []byte) {
	t.Helper()
	launchEnv, err := SignLaunch(s, sampleLaunch(session1))
	if err != nil {
		t.Fatal(err)
	}
	st := sampleStatement(launchEnv, session1)
	st.Entries = entries
	st.Incomplete = nil
	stEnv, err = SignStatement(s, st)
	if err != nil {
		t.Fatalf("SignStatement: %v", err)
	}
	return stEnv, launchEnv
}

// payloadSubjects returns the subjects of a signed statement as written.
func payloadSubjects(t *testing.T, env []byte) []subject {
	t.Helper()
	var it intoto[jsontext.Value]
	if err := json.Unmarshal(payloadOf(t, env), &it); err != nil {
		t.Fatal(err)
	}
	return it.Subject
}

// TestSignedSubjects: a signed statement carries StatementSubjects and
// verifies.
func TestSignedSubjects(t *testing.T) {
	s := testSigner(t, 1)
	stEnv, launchEnv := signSubjects(t, s, subjectEntries())
	st, err := VerifyStatement(stEnv, s.Public(), launchEnv)
	if err != nil {
		t.Fatal(err)
	}
	var got []Subject
	for _, sub := range payloadSubjects(t, stEnv) {
		got = append(got, Subject{sub.Name, sub.Digest.SHA256})
	}
	if want := StatementSubjects(st.Root, st.Entries); !reflect.DeepEqual(got, want) || len(got) != 5 {
		t.Errorf("signed subjects:\n got %q\nwant %q", got, want)
	}
}

// TestSubjectsCap: past MaxSubjects-1 files the subjects stop; the
// statement lists and verifies every entry all the same.
func TestSubjectsCap(t *testing.T) {
	var entries []Entry
	for i := range 3000 {
		entries = append(entries, Entry{Path: Path(fmt.Sprintf("f%05d", i)), Change: Added,
			New: &State{Type: File, Mode: 0o644, Size: 1, SHA256: digest(fmt.Sprint(i))}})
	}
	s := testSigner(t, 1)
	stEnv, launchEnv := signSubjects(t, s, entries)
	st, err := VerifyStatement(stEnv, s.Public(), launchEnv)
	if err != nil {
		t.Fatal(err)
	}
	subs := payloadSubjects(t, stEnv)
	if len(st.Entries) != 3000 || len(subs) != MaxSubjects {
		t.Fatalf("%d entries, %d subjects; want 3000, %d", len(st.Entries), len(subs), MaxSubjects)
	}
	last := subs[len(subs)-1]
	if want := fmt.Sprintf("f%05d", MaxSubjects-2); last.Name != want || last.Digest.SHA256 != hexDigest(fmt.Sprint(MaxSubjects-2)) {
		t.Errorf("last subject %+v, want %s", last, want)
	}
}

// resignSubjects re-signs stEnv's payload with its subjects replaced by
// what f makes of them.
func resignSubjects(t *testing.T, s *Signer, stEnv []byte, f func([]subject) []subject) []byte {
	t.Helper()
	return resealEdited(t, s, stEnv, func(it *intoto[jsontext.Value]) { it.Subject = f(append([]subject(nil), it.Subject...)) })
}

// TestVerifySubjectsStrict: the signer vouches for a subject list that is
// not the one the entries make: each is refused as malformed (the root
// subject's digest keeps its own check, not verified).
func TestVerifySubjectsStrict(t *testing.T) {
	s := testSigner(t, 1)
	stEnv, launchEnv := signSubjects(t, s, subjectEntries())
	sub := func(name, d string) subject { return subject{Name: name, Digest: digestSet{SHA256: d}} }
	for _, c := range []struct {
		name string
		f    func([]subject) []subject
		want error
	}{
		{"unchanged", func(s []subject) []subject { return s }, nil},
		{"wrong digest", func(s []subject) []subject { s[2].Digest.SHA256 = hexDigest("other"); return s }, ErrMalformed},
		{"wrong name", func(s []subject) []subject { s[1].Name = "a.gO"; return s }, ErrMalformed},
		{"not backed by an entry", func(s []subject) []subject { return append(s, sub("zz", hexDigest("zz"))) }, ErrMalformed},
		{"a deleted file", func(s []subject) []subject { return append(s, sub("gone.go", hexDigest("gone"))) }, ErrMalformed},
		{"a metadata change", func(s []subject) []subject {
			return append(s[:3], append([]subject{sub("mode.sh", hexDigest("m"))}, s[3:]...)...)
		}, ErrMalformed},
		{"an escaped name", func(s []subject) []subject {
			return append(s[:3], append([]subject{sub("new%0Aline", hexDigest("nl"))}, s[3:]...)...)
		}, ErrMalformed},
		{"missing", func(s []subject) []subject { return s[:len(s)-1] }, ErrMalformed},
		{"only the root", func(s []subject) []subject { return s[:1] }, ErrMalformed},
		{"swapped", func(s []subject) []subject { s[1], s[2] = s[2], s[1]; return s }, ErrMalformed},
		{"root last", func(s []subject) []subject { return append(s[1:], s[0]) }, ErrMalformed},
		{"none", func([]subject) []subject { return []subject{} }, ErrMalformed},
		{"duplicate", func(s []subject) []subject { return append(s, s[len(s)-1]) }, ErrMalformed},
		{"not hex", func(s []subject) []subject { s[1].Digest.SHA256 = "A" + s[1].Digest.SHA256[1:]; return s }, ErrMalformed},
		{"over the cap", func(s []subject) []subject {
			for len(s) <= MaxSubjects {
				s = append(s, s[1])
			}
			return s
		}, ErrMalformed},
		{"root digest", func(s []subject) []subject { s[0].Digest.SHA256 = hexDigest("x"); return s }, ErrNotVerified},
	} {
		_, err := VerifyStatement(resignSubjects(t, s, stEnv, c.f), s.Public(), launchEnv)
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
}

// TestOneSubjectElsewhere: launch records, checkpoints and heads keep
// exactly one subject; a second, even a file's, is malformed.
func TestOneSubjectElsewhere(t *testing.T) {
	s := testSigner(t, 1)
	launchEnv, err := SignLaunch(s, sampleLaunch(session1))
	if err != nil {
		t.Fatal(err)
	}
	env := resignSubjects(t, s, launchEnv, func(sub []subject) []subject {
		return append(sub, subject{Name: "a.go", Digest: digestSet{SHA256: hexDigest("a")}})
	})
	if _, err := VerifyLaunch(env, s.Public()); !errors.Is(err, ErrMalformed) {
		t.Errorf("launch record with two subjects: %v", err)
	}
	st, err := VerifyStatement(mustSign(t, s, launchEnv), s.Public(), launchEnv)
	if err != nil {
		t.Fatal(err)
	}
	headEnv, err := SignHead(s, HeadOf(st))
	if err != nil {
		t.Fatal(err)
	}
	env = resignSubjects(t, s, headEnv, func(sub []subject) []subject {
		return append(sub, subject{Name: "a.go", Digest: digestSet{SHA256: hexDigest("a")}})
	})
	if _, err := VerifyHead(env, s.Public()); !errors.Is(err, ErrMalformed) {
		t.Errorf("head with two subjects: %v", err)
	}
}

func mustSign(t *testing.T, s *Signer, launchEnv []byte) []byte {
	t.Helper()
	st := sampleStatement(launchEnv, session1)
	st.Entries = subjectEntries()
	env, err := SignStatement(s, st)
	if err != nil {
		t.Fatal(err)
	}
	return env
}
