package attest

import (
	"errors"
	"testing"
)

func TestReadStatementChecksAllButTheSignature(t *testing.T) {
	_, env := signedPair(t, testSigner(t, 1))
	st, err := ReadStatement(env)
	if err != nil || st.Count == 0 {
		t.Fatalf("ReadStatement = %v, %v", st, err)
	}
	if _, err := ReadStatement(env[:len(env)/2]); !errors.Is(err, ErrMalformed) {
		t.Errorf("truncated: %v, want ErrMalformed", err)
	}
	if _, err := ReadStatement(append(append([]byte{}, env...), ' ')); !errors.Is(err, ErrMalformed) {
		t.Errorf("trailing space: %v, want ErrMalformed", err)
	}
}
