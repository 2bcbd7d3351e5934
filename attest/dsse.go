package attest

import (
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"strconv"
)

// PayloadType is the DSSE payload type of every layerseal envelope.
const PayloadType = "application/vnd.in-toto+json"

// envelope is a DSSE envelope with exactly one signature. Its file form is
// its canonical JSON followed by one newline:
//
//	{"payloadType":"application/vnd.in-toto+json","payload":"<base64>","signatures":[{"keyid":"<key id>","sig":"<base64>"}]}
//
// with base64 the standard alphabet with padding.
type envelope struct {
	PayloadType string      `json:"payloadType"`
	Payload     []byte      `json:"payload"`
	Signatures  []signature `json:"signatures"`
}

type signature struct {
	KeyID string `json:"keyid"`
	Sig   []byte `json:"sig"`
}

// pae is DSSE's pre-authentication encoding, the bytes a signature covers:
// "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body, lengths in decimal.
func pae(typ string, body []byte) []byte {
	b := make([]byte, 0, len("DSSEv1   ")+2*20+len(typ)+len(body))
	return append(appendPAEHeader(b, typ, len(body)), body...)
}

// appendPAEHeader appends pae up to a body of n bytes.
func appendPAEHeader(b []byte, typ string, n int) []byte {
	b = append(b, "DSSEv1 "...)
	b = strconv.AppendInt(b, int64(len(typ)), 10)
	b = append(b, ' ')
	b = append(b, typ...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, ' ')
}

// payloadRoom is the room makeInToto leaves in front of a payload for its
// pre-authentication header, so that signing a large payload copies
// nothing (see sealInPlace).
const payloadRoom = 96

// seal signs payload and returns the envelope file bytes.
func seal(s *Signer, payload []byte) ([]byte, error) {
	return envelopeFile(s.KeyID(), payload, s.sign(pae(PayloadType, payload)))
}

// sealInPlace is seal for roomy[payloadRoom:], writing its pae header
// into the room in front of it.
func sealInPlace(s *Signer, roomy []byte) ([]byte, error) {
	payload := roomy[payloadRoom:]
	var h [payloadRoom]byte
	head := appendPAEHeader(h[:0], PayloadType, len(payload))
	if len(head) > payloadRoom {
		return seal(s, payload)
	}
	msg := roomy[payloadRoom-len(head):]
	copy(msg, head)
	return envelopeFile(s.KeyID(), payload, s.sign(msg))
}

// envelopeFile returns the file bytes of the envelope of payload with its
// one signature. It writes the canonical JSON directly, into a buffer of
// its exact size: every member is plain ASCII that needs no escaping (the
// payload type, a hex key ID, base64), so the spelling is fixed.
func envelopeFile(keyID string, payload, sig []byte) ([]byte, error) {
	if err := checkHex("key id", keyID); err != nil {
		return nil, fmt.Errorf("encode envelope: %w", err)
	}
	const (
		open1 = `{"payloadType":"` + PayloadType + `","payload":"`
		open2 = `","signatures":[{"keyid":"`
		open3 = `","sig":"`
		end   = `"}]}` + "\n"
	)
	enc := base64.StdEncoding
	b := make([]byte, 0, len(open1)+enc.EncodedLen(len(payload))+len(open2)+len(keyID)+len(open3)+enc.EncodedLen(len(sig))+len(end))
	b = append(b, open1...)
	b = enc.AppendEncode(b, payload)
	b = append(b, open2...)
	b = append(b, keyID...)
	b = append(b, open3...)
	b = enc.AppendEncode(b, sig)
	return append(b, end...), nil
}

// open parses envelope file bytes of at most max bytes strictly and checks
// its one signature with pub, returning the signed payload. Malformed input
// gives an error wrapping ErrMalformed; a signature that is not pub's valid
// signature gives ErrNotVerified.
func open(file []byte, max int, pub PublicKey) ([]byte, error) {
	if len(pub) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("verify: ed25519 public key of %d bytes", len(pub))
	}
	env, err := parseEnvelope(file, max)
	if err != nil {
		return nil, err
	}
	sig := env.Signatures[0]
	if sig.KeyID != KeyID(pub) || !ed25519.Verify(pub, pae(env.PayloadType, env.Payload), sig.Sig) {
		return nil, ErrNotVerified
	}
	return env.Payload, nil
}

// parseEnvelope parses envelope file bytes of at most max bytes strictly,
// without checking the signature.
func parseEnvelope(file []byte, max int) (*envelope, error) {
	if len(file) > max {
		return nil, malformed("envelope of %d bytes is over the limit of %d", len(file), max)
	}
	var env envelope
	if err := strictJSON(file, &env, "envelope"); err != nil {
		return nil, err
	}
	if env.PayloadType != PayloadType {
		return nil, malformed("unsupported payload type %q", env.PayloadType)
	}
	if len(env.Signatures) != 1 {
		return nil, malformed("envelope has %d signatures, want 1", len(env.Signatures))
	}
	if err := canonicalCheck(file, &env, true, "envelope"); err != nil {
		return nil, err
	}
	return &env, nil
}
