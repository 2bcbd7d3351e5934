package tlog

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	fnote "github.com/transparency-dev/formats/note"
	"golang.org/x/mod/sumdb/note"
)

// errNotNoteKey says a file is not a key of a log or a witness.
var errNotNoteKey = errors.New("not a log's or a witness's key (those are one line, NAME+HASH+KEY, from log init or witness keygen; session keys from keygen are another kind)")

// maxKeySize bounds a key file: a note key is one short line.
const maxKeySize = 4 << 10

// GenerateKey makes a signed-note key named name (the log's origin, or the
// witness's name) and writes the private key to path (mode 0600, refusing
// to overwrite) and the verifier key to path+".pub". It returns the
// verifier key, the line a verifier is given.
func GenerateKey(path, name string) (string, error) {
	skey, vkey, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		return "", fmt.Errorf("key name %q: %w (a name has no spaces and no '+')", name, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("key file %q exists: a key is never overwritten (give another name)", path)
	}
	if err != nil {
		return "", fmt.Errorf("create key: %w", err)
	}
	_, err = f.WriteString(skey + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.WriteFile(path+".pub", []byte(vkey+"\n"), 0o644)
	}
	if err != nil {
		os.Remove(path)
		return "", fmt.Errorf("write key: %w", err)
	}
	return vkey, nil
}

func readKeyLine(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b := make([]byte, maxKeySize+1)
	n, _ := f.Read(b)
	if n > maxKeySize {
		return "", fmt.Errorf("key file %q is over %d bytes: %w", path, maxKeySize, errNotNoteKey)
	}
	s := strings.TrimSuffix(string(b[:n]), "\n")
	if strings.ContainsAny(s, "\n\r") || s == "" {
		return "", fmt.Errorf("key file %q is not one line: %w", path, errNotNoteKey)
	}
	return s, nil
}

// LoadSigner reads a private key that GenerateKey wrote.
func LoadSigner(path string) (note.Signer, error) {
	s, err := readKeyLine(path)
	if err != nil {
		return nil, err
	}
	signer, err := note.NewSigner(s)
	if err != nil {
		if _, verr := note.NewVerifier(s); verr == nil {
			return nil, fmt.Errorf("key file %q is a verifier (public) key: give the private key it belongs to", path)
		}
		return nil, fmt.Errorf("key file %q is not a signed-note private key", path)
	}
	return signer, nil
}

// LoadCosigner reads a witness's private key as a cosignature/v1 signer
// (C2SP tlog-cosignature: the signature covers a timestamp too).
func LoadCosigner(path string) (*fnote.Signer, error) {
	if _, err := LoadSigner(path); err != nil {
		return nil, err
	}
	s, _ := readKeyLine(path)
	c, err := fnote.NewSignerForCosignatureV1(s)
	if err != nil {
		return nil, fmt.Errorf("key file %q: %w", path, err)
	}
	return c, nil
}

// ParseVerifier reads a log's verifier key: the text itself or a file
// holding it.
func ParseVerifier(keyOrFile string) (note.Verifier, error) {
	s, err := keyText(keyOrFile)
	if err != nil {
		return nil, err
	}
	v, err := note.NewVerifier(s)
	if err != nil {
		if _, serr := note.NewSigner(s); serr == nil {
			return nil, fmt.Errorf("%q is a private key: give its verifier key (the .pub file)", keyOrFile)
		}
		return nil, fmt.Errorf("%q is not a signed-note verifier key", keyOrFile)
	}
	return v, nil
}

// ParseCosignatureVerifier reads a witness's verifier key (the text or a
// file holding it), for cosignature/v1 signatures.
func ParseCosignatureVerifier(keyOrFile string) (note.Verifier, error) {
	s, err := keyText(keyOrFile)
	if err != nil {
		return nil, err
	}
	v, err := fnote.NewVerifierForCosignatureV1(s)
	if err != nil {
		return nil, fmt.Errorf("%q is not a witness verifier key", keyOrFile)
	}
	return v, nil
}

// keyText is keyOrFile's contents when it names a file, else keyOrFile.
func keyText(keyOrFile string) (string, error) {
	s, err := readKeyLine(keyOrFile)
	if errors.Is(err, fs.ErrNotExist) && strings.Count(keyOrFile, "+") >= 2 {
		return keyOrFile, nil
	}
	return s, err
}
