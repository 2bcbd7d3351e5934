package attest_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"fmt"

	"filippo.io/mldsa"

	"github.com/layerseal/layerseal/attest"
)

// A hybrid key is an ed25519 key and an ML-DSA-65 key: its ID names the
// algorithm, and every envelope it signs carries one signature of each
// component, under that component's own key ID.
func ExampleNewSigner_hybrid() {
	// Real keys come from GenerateKey and LoadPrivateKey.
	ed := ed25519.NewKeyFromSeed(make([]byte, 32))
	ml, _ := mldsa.NewPrivateKey(mldsa.MLDSA65(), make([]byte, 32))
	signer, _ := attest.NewSigner(ed, ml)
	fmt.Println(signer.KeyID())

	head := &attest.Head{Kind: attest.HeadKindStatement, SessionID: "0123456789abcdef0123456789abcdef",
		Launch: make([]byte, 32), Root: make([]byte, 32), AppliedRoot: make([]byte, 32), Complete: true}
	env, _ := attest.SignHead(signer, head)
	var e struct {
		Signatures []struct {
			KeyID string `json:"keyid"`
			Sig   []byte `json:"sig"`
		} `json:"signatures"`
	}
	_ = json.Unmarshal(env, &e)
	for _, s := range e.Signatures {
		fmt.Println(s.KeyID, len(s.Sig))
	}
	_, err := attest.VerifyHead(env, signer.Public())
	fmt.Println(head.Alg, err)

	// Without its ML-DSA-65 signature the head verifies under no key.
	cut := bytes.Index(env, []byte(`,{"keyid":"ml-dsa-65:`))
	stripped := append(env[:cut:cut], "]}\n"...)
	_, err = attest.VerifyHead(stripped, signer.Public())
	fmt.Println(err)
	// Output:
	// hybrid:d68b640564e7e409b921867ae6d18dfabfe28aed1d4536f7d0ffa7b2bb343da0
	// ed25519:339e2ff917630507b6a423b5ce084e285d1fa65d93b3e27a6195d3bbebc9ae23 64
	// ml-dsa-65:74a967da48075517e7e93c468a90724f4e96ce11ff30c3288c4b708583d711e0 3309
	// hybrid <nil>
	// not verified
}
