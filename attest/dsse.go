package attest

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
)

// PayloadType is the DSSE payload type of every layerseal envelope.
const PayloadType = "application/vnd.in-toto+json"

// envelope is a DSSE envelope with one signature, or two of a hybrid key.
// Its file form is its canonical JSON followed by one newline:
//
//	{"payloadType":"application/vnd.in-toto+json","payload":"<base64>","signatures":[SIG]}
//
// with base64 the standard alphabet with padding, and SIG, for a key of
// algorithm ed25519 or ml-dsa-65,
//
//	{"keyid":"<key id>","sig":"<base64>"}
//
// with the key's ID (see PublicKey) and its signature of the pre-
// authentication encoding (64 bytes of ed25519, 3309 of ML-DSA-65). A hybrid
// key signs with both its components, so its SIG is two, separated by a
// comma, the ed25519 one first:
//
//	{"keyid":"ed25519:<hex>","sig":"<base64>"},{"keyid":"ml-dsa-65:<hex>","sig":"<base64>"}
//
// each keyid being its component's own key ID (the SHA-256 of that
// component's encoding, not of the hybrid's), each sig that component's
// signature of the same pre-authentication encoding. The payload names the
// hybrid key's ID, so neither signature alone verifies under any key.
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
	sigs, err := s.sign(pae(PayloadType, payload))
	if err != nil {
		return nil, err
	}
	return envelopeFile(payload, sigs)
}

// sealInPlace is seal for roomy[payloadRoom:], writing its pae header
// into the room in front of it. When roomy has the capacity
// (envelopeRoom), the envelope is written over the payload in the same
// buffer (see envelopeInPlace), so a large payload is not held beside
// its envelope.
func sealInPlace(s *Signer, roomy []byte) ([]byte, error) {
	payload := roomy[payloadRoom:]
	var h [payloadRoom]byte
	head := appendPAEHeader(h[:0], PayloadType, len(payload))
	if len(head) > payloadRoom {
		return seal(s, payload)
	}
	msg := roomy[payloadRoom-len(head):]
	copy(msg, head)
	sigs, err := s.sign(msg)
	if err != nil {
		return nil, err
	}
	if env, ok, err := envelopeInPlace(roomy, sigs); ok || err != nil {
		return env, err
	}
	return envelopeFile(payload, sigs)
}

// The envelope file's fixed parts (see envelope).
const (
	envOpen1 = `{"payloadType":"` + PayloadType + `","payload":"`
	envOpen2 = `","signatures":[`
	envSig1  = `{"keyid":"`
	envSig2  = `","sig":"`
	envSig3  = `"}`
	envEnd   = `]}` + "\n"
)

// envelopeRoom is the room a buffer needs past a payload's base64 for the
// rest of its envelope: the signatures of a hybrid key and their key IDs.
const envelopeRoom = 8192

// envelopeSize returns the size of the envelope file of a payload of n
// bytes with sigs.
func envelopeSize(n int, sigs []signature) (int, error) {
	enc := base64.StdEncoding
	size := len(envOpen1) + enc.EncodedLen(n) + len(envOpen2) + len(envEnd)
	for _, s := range sigs {
		if err := checkKeyID(s.KeyID); err != nil {
			return 0, fmt.Errorf("encode envelope: %w", err)
		}
		size += len(envSig1) + len(s.KeyID) + len(envSig2) + enc.EncodedLen(len(s.Sig)) + len(envSig3) + 1
	}
	return size, nil
}

// envelopeFile returns the file bytes of the envelope of payload with its
// signatures. It writes the canonical JSON directly, into a buffer of its
// exact size: every member is plain ASCII that needs no escaping (the
// payload type, a key ID, base64), so the spelling is fixed.
func envelopeFile(payload []byte, sigs []signature) ([]byte, error) {
	n, err := envelopeSize(len(payload), sigs)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, n)
	b = append(b, envOpen1...)
	b = base64.StdEncoding.AppendEncode(b, payload)
	return appendSignatures(b, sigs), nil
}

// appendSignatures appends the envelope's part after the payload.
func appendSignatures(b []byte, sigs []signature) []byte {
	b = append(b, envOpen2...)
	for i, s := range sigs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, envSig1...)
		b = append(b, s.KeyID...)
		b = append(b, envSig2...)
		b = base64.StdEncoding.AppendEncode(b, s.Sig)
		b = append(b, envSig3...)
	}
	return append(b, envEnd...)
}

// The payload's base64 is written over the payload itself, from its end:
// it starts where the payload does and each group of 3 bytes becomes 4
// that lie at or past it, so no byte is overwritten before it is read.
const envInPlaceAt = payloadRoom - len(envOpen1) // where the envelope starts in the buffer

// envelopeInPlace is envelopeFile for roomy[payloadRoom:], written into
// roomy's own array when its capacity allows (ok), and returned as a
// slice of it; the payload is gone then.
func envelopeInPlace(roomy []byte, sigs []signature) (env []byte, ok bool, err error) {
	payload := roomy[payloadRoom:]
	n, err := envelopeSize(len(payload), sigs)
	if err != nil || envInPlaceAt+n > cap(roomy) {
		return nil, false, err
	}
	b := roomy[:envInPlaceAt+n]
	out := b[payloadRoom:] // the base64, starting where the payload does
	enc := base64.StdEncoding
	full := len(payload) / 3 * 3
	// The last, partial group first, then whole chunks from the end, each
	// copied out before its base64 is written.
	var chunk [3 * 1024]byte
	rest := copy(chunk[:], payload[full:])
	enc.Encode(out[full/3*4:], chunk[:rest])
	for end := full; end > 0; {
		start := max(0, end-len(chunk))
		c := copy(chunk[:], payload[start:end])
		enc.Encode(out[start/3*4:], chunk[:c])
		end = start
	}
	copy(b[envInPlaceAt:], envOpen1)
	tail := appendSignatures(b[:payloadRoom+enc.EncodedLen(len(payload))], sigs)
	return tail[envInPlaceAt:], true, nil
}

// open parses envelope file bytes of at most max bytes strictly and checks
// its signatures with pub, returning the signed payload. Malformed input
// gives an error wrapping ErrMalformed; signatures that are not exactly
// pub's valid signatures (one for each of its components, in order) give
// ErrNotVerified.
func open(file []byte, max int, pub PublicKey) ([]byte, error) {
	if pub.IsZero() {
		return nil, errors.New("verify: no public key")
	}
	env, err := parseEnvelope(file, max)
	if err != nil {
		return nil, err
	}
	parts := pub.components()
	if len(env.Signatures) != len(parts) {
		return nil, ErrNotVerified
	}
	msg := pae(env.PayloadType, env.Payload)
	for i, p := range parts {
		sig := env.Signatures[i]
		if sig.KeyID != p.id || !p.verifySig(msg, sig.Sig) {
			return nil, ErrNotVerified
		}
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
	if err := checkSignatures(env.Signatures); err != nil {
		return nil, err
	}
	if err := canonicalCheck(file, &env, true, "envelope"); err != nil {
		return nil, err
	}
	return &env, nil
}

// checkSignatures checks the form of an envelope's signatures: one of an
// ed25519 or ML-DSA-65 key, or an ed25519 one then an ML-DSA-65 one (a
// hybrid key's), each of its algorithm's size.
func checkSignatures(sigs []signature) error {
	var algs []string
	for _, s := range sigs {
		alg, err := keyIDAlg(s.KeyID)
		if err != nil {
			return malformed("envelope signature: %v", err)
		}
		if alg == AlgHybrid {
			return malformed("envelope signature under the hybrid key id %q: a hybrid key signs with each of its keys under its own id", s.KeyID)
		}
		if len(s.Sig) != sigSize(alg) {
			return malformed("%s signature of %d bytes, want %d", alg, len(s.Sig), sigSize(alg))
		}
		algs = append(algs, alg)
	}
	switch {
	case len(algs) == 1:
	case len(algs) == 2 && algs[0] == AlgEd25519 && algs[1] == AlgMLDSA65:
	case len(algs) == 2:
		return malformed("envelope signatures of %s and %s: a hybrid envelope has an ed25519 then an ML-DSA-65 signature", algs[0], algs[1])
	default:
		return malformed("envelope has %d signatures, want 1 (2 of a hybrid key)", len(algs))
	}
	return nil
}
