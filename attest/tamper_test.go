package attest

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// jsonLeaf is one scalar value in a token stream.
type jsonLeaf struct {
	index int    // position in the token stream
	ptr   string // RFC 6901 pointer
}

// jsonTokens splits b into tokens and finds its scalar values (not names).
func jsonTokens(t *testing.T, b []byte) ([]jsontext.Token, []jsonLeaf) {
	t.Helper()
	dec := jsontext.NewDecoder(bytes.NewReader(b))
	var toks []jsontext.Token
	var leaves []jsonLeaf
	for {
		tok, err := dec.ReadToken()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("tokenize: %v", err)
		}
		toks = append(toks, tok.Clone())
		switch tok.Kind() {
		case '{', '}', '[', ']':
			continue
		}
		if kind, n := dec.StackIndex(dec.StackDepth()); kind == '{' && n%2 == 1 {
			continue // an object member name
		}
		leaves = append(leaves, jsonLeaf{index: len(toks) - 1, ptr: string(dec.StackPointer())})
	}
	return toks, leaves
}

func encodeTokens(t *testing.T, toks []jsontext.Token) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := jsontext.NewEncoder(&b)
	for _, tok := range toks {
		if err := enc.WriteToken(tok); err != nil {
			t.Fatalf("encode: %v", err)
		}
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// retype replaces a value with one of another JSON type.
func retype(tok jsontext.Token) jsontext.Token {
	if tok.Kind() == '"' {
		return jsontext.Int(7)
	}
	return jsontext.String("x")
}

// revalue replaces a value with another of the same JSON type, keeping hex
// and decimal strings hex and decimal where it can.
func revalue(tok jsontext.Token) jsontext.Token {
	switch tok.Kind() {
	case 't', 'f':
		return jsontext.Bool(!tok.Bool())
	case '0':
		if v, err := strconv.ParseInt(tok.String(), 10, 64); err == nil && v < 1<<62 {
			return jsontext.Int(v + 1)
		}
		v, _ := strconv.ParseUint(tok.String(), 10, 64)
		return jsontext.Uint(v - 1)
	case 'n':
		return jsontext.Bool(true)
	}
	s := tok.String()
	if s == "" {
		return jsontext.String("x")
	}
	last := s[len(s)-1]
	switch {
	case last >= '0' && last <= '8', last >= 'a' && last <= 'e':
		return jsontext.String(s[:len(s)-1] + string(last+1))
	case last == '9':
		return jsontext.String(s[:len(s)-1] + "0")
	case last == 'f':
		return jsontext.String(s[:len(s)-1] + "a")
	}
	return jsontext.String(s + "x")
}

// expectation of a re-signed mutation of a statement.
type expectation int

const (
	acceptOrMalformed expectation = iota // a valid new value is the signer's to make
	wantMalformed
	wantNotVerified
	wantRejected // either class
)

// statementExpect says what a re-signed, same-typed change of the value at
// ptr must do when the statement is verified with its launch record.
func statementExpect(ptr string) expectation {
	switch {
	case ptr == "/_type", ptr == "/predicateType", ptr == "/subject/0/name",
		strings.HasPrefix(ptr, "/subject/") && !strings.HasPrefix(ptr, "/subject/0/"),
		ptr == "/predicate/count", ptr == "/predicate/complete", ptr == "/predicate/applied_count",
		strings.HasSuffix(ptr, "/code") && strings.HasPrefix(ptr, "/predicate/incomplete/"):
		return wantMalformed
	case ptr == "/subject/0/digest/sha256", ptr == "/predicate/root", ptr == "/predicate/applied_root",
		ptr == "/predicate/session_id", ptr == "/predicate/launch_sha256",
		ptr == "/predicate/key_id", ptr == "/predicate/workspace":
		return wantNotVerified
	case strings.HasPrefix(ptr, "/predicate/changes/"):
		return wantRejected
	}
	return acceptOrMalformed
}

func checkClass(t *testing.T, what string, err error, want expectation, changed func() bool) {
	t.Helper()
	switch want {
	case wantMalformed:
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want ErrMalformed", what, err)
		}
	case wantNotVerified:
		if err != ErrNotVerified {
			t.Errorf("%s: got %v, want ErrNotVerified", what, err)
		}
	case wantRejected:
		if err != ErrNotVerified && !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want a rejection", what, err)
		}
	case acceptOrMalformed:
		if err == nil {
			if !changed() {
				t.Errorf("%s: accepted with no change to the result", what)
			}
		} else if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want ErrMalformed or acceptance", what, err)
		}
	}
}

// TestTamperStatement changes every value of a signed statement, one at a
// time, with two kinds of change (another JSON type; another value of the
// same type), and checks the verifier's answer: unsigned changes fail the
// signature; re-signed changes fail validation, the Merkle root or the launch
// binding, unless they are a valid value that only the signer vouches for.
func TestTamperStatement(t *testing.T) {
	s := testSigner(t, 1)
	launchEnv, stEnv := signedPair(t, s)
	leaves := tamperStatement(t, s, launchEnv, stEnv, func(string) bool { return true }, statementExpect)
	covered := map[string]bool{}
	for _, ptr := range leaves {
		covered[ptr[:strings.LastIndexByte(ptr, '/')]] = true
	}
	for _, want := range []string{"/predicate", "/predicate/changes/3/new", "/predicate/changes/3/new/xattrs/1", "/predicate/incomplete/0", "/predicate/stats", "/predicate/logs/1", "/subject/0/digest", "/subject/1/digest"} {
		if !covered[want] {
			t.Errorf("no value under %s was changed", want)
		}
	}
	if len(leaves) < 100 {
		t.Errorf("only %d values changed", len(leaves))
	}
}

// tamperStatement changes each value of the statement stEnv (bound to
// launchEnv, signed by s) that keep selects by its JSON pointer, one at a
// time, both ways (another JSON type; another value of the same type), and
// checks the verifier's answer: unsigned, the signature fails; re-signed,
// as expect says for the value (malformed, for another type). It returns
// the pointers of the values it changed.
func tamperStatement(t *testing.T, s *Signer, launchEnv, stEnv []byte, keep func(ptr string) bool, expect func(ptr string) expectation) []string {
	t.Helper()
	orig, err := VerifyStatement(stEnv, s.Public(), launchEnv)
	if err != nil {
		t.Fatal(err)
	}
	payload := payloadOf(t, stEnv)
	toks, leaves := jsonTokens(t, payload)
	if !bytes.Equal(encodeTokens(t, toks), payload) {
		t.Fatal("token round trip changed the payload")
	}
	var changed []string
	for _, leaf := range leaves {
		if !keep(leaf.ptr) {
			continue
		}
		changed = append(changed, leaf.ptr)
		for kind, mutate := range map[string]func(jsontext.Token) jsontext.Token{"retype": retype, "revalue": revalue} {
			mut := append([]jsontext.Token(nil), toks...)
			mut[leaf.index] = mutate(toks[leaf.index])
			p := encodeTokens(t, mut)
			what := kind + " " + leaf.ptr

			// Not re-signed: the original signature no longer matches.
			env := bytes.Replace(stEnv, []byte(jsonBase64(payload)), []byte(jsonBase64(p)), 1)
			if _, err := VerifyStatement(env, s.Public(), launchEnv); err != ErrNotVerified {
				t.Errorf("unsigned %s: got %v, want ErrNotVerified", what, err)
			}

			// Re-signed with the same key.
			got, err := VerifyStatement(reseal(t, s, p), s.Public(), launchEnv)
			want := expect(leaf.ptr)
			if kind == "retype" {
				want = wantMalformed
			}
			checkClass(t, "re-signed "+what, err, want, func() bool { return !reflect.DeepEqual(got, orig) })
		}
	}
	return changed
}

// TestTamperLaunch does for a launch record what TestTamperStatement does
// for a statement. A re-signed change has its subject digest recomputed, so
// it reaches value validation; any accepted change must still break the
// binding of the session's statement to the launch record.
func TestTamperLaunch(t *testing.T) {
	s := testSigner(t, 1)
	launchEnv, stEnv := signedPair(t, s)
	orig, err := VerifyLaunch(launchEnv, s.Public())
	if err != nil {
		t.Fatal(err)
	}
	payload := payloadOf(t, launchEnv)
	toks, leaves := jsonTokens(t, payload)
	accepted := 0
	for _, leaf := range leaves {
		for kind, mutate := range map[string]func(jsontext.Token) jsontext.Token{"retype": retype, "revalue": revalue} {
			mut := append([]jsontext.Token(nil), toks...)
			mut[leaf.index] = mutate(toks[leaf.index])
			p := encodeTokens(t, mut)
			what := kind + " " + leaf.ptr

			env := bytes.Replace(launchEnv, []byte(jsonBase64(payload)), []byte(jsonBase64(p)), 1)
			if _, err := VerifyLaunch(env, s.Public()); err != ErrNotVerified {
				t.Errorf("unsigned %s: got %v, want ErrNotVerified", what, err)
			}

			if leaf.ptr != "/subject/0/digest/sha256" {
				p = fixLaunchSubject(p)
			}
			env = reseal(t, s, p)
			got, err := VerifyLaunch(env, s.Public())
			want := acceptOrMalformed
			switch {
			case kind == "retype", leaf.ptr == "/_type", leaf.ptr == "/predicateType", leaf.ptr == "/subject/0/name",
				leaf.ptr == "/predicate/session_id", leaf.ptr == "/predicate/started",
				leaf.ptr == "/predicate/lower/mount_id_known":
				want = wantMalformed
			case leaf.ptr == "/subject/0/digest/sha256", leaf.ptr == "/predicate/key_id":
				want = wantNotVerified
			}
			checkClass(t, "re-signed "+what, err, want, func() bool { return !reflect.DeepEqual(got, orig) })
			if err == nil {
				accepted++
				if _, err := VerifyStatement(stEnv, s.Public(), env); err != ErrNotVerified {
					t.Errorf("statement paired with launch after %s: got %v, want ErrNotVerified", what, err)
				}
			}
		}
	}
	if accepted == 0 || len(leaves) < 30 {
		t.Errorf("%d values changed, %d accepted: the walk is not reaching the record", len(leaves), accepted)
	}
}

// fixLaunchSubject sets a launch payload's subject digest to match its
// predicate, when the payload still parses.
func fixLaunchSubject(p []byte) []byte {
	var it intoto[jsontext.Value]
	if err := json.Unmarshal(p, &it); err != nil || len(it.Subject) != 1 {
		return p
	}
	it.Subject[0].Digest.SHA256 = predicateDigest(it.Predicate)
	b, err := canonicalJSON(&it)
	if err != nil {
		return p
	}
	return b
}

func jsonBase64(b []byte) string {
	s, _ := json.Marshal(b)
	return strings.Trim(string(s), `"`)
}
