// Package attest holds layerseal's evidence formats: the change model, the
// signed launch record and change statement, their Merkle tree, and their
// verification. It is pure Go with no Linux dependencies, so a verifier
// builds and runs anywhere.
//
// For most uses:
//
//   - make a key pair once with [GenerateKey] (ed25519, ML-DSA-65, or a
//     hybrid of both: see [PublicKey]); load it with [LoadPrivateKey]
//     before the agent starts;
//   - sign a [LaunchRecord] with [SignLaunch] before the run and a
//     [Statement] with [SignStatement] after it;
//   - check them offline with [VerifyLaunch] and [VerifyStatement], or a
//     whole session's output directory (statement, launch record and
//     checkpoint chain) with [VerifySession]; [Verify] takes one file of
//     any kind, and [Diff] compares two points of one session.
//
// Both artifacts are in-toto Statement v1 payloads in DSSE envelopes, so
// standard Sigstore tooling can check their signatures too. Their predicate
// types ([LaunchPredicateType], [StatementPredicateType]) are the format
// tags; a verifier refuses any other. A statement commits to its entries with
// an RFC 6962 Merkle tree over their leaf encodings ([Entry.MarshalLeaf]),
// sorted by path bytes.
//
// A statement's or checkpoint's signed [Head] ([HeadOf], [SignHead],
// [VerifyHead]) commits to its change set without listing it; a [Prover]
// makes a proof bundle of one path against it (an inclusion proof of its
// entry, an absence proof by its adjacent leaves, or every change under a
// subtree), which [VerifyBundle] checks with the public key alone. An
// [Export] holds a whole session in one file, which [VerifyExport] checks.
//
// Every value has exactly one valid encoding: paths and other byte strings
// use the text form documented at [Path.MarshalText], and decoding is strict
// (see [VerifyStatement]). Verification fails with an error that is either
// [ErrNotVerified] (one opaque error for every failed cryptographic check) or
// wraps [ErrMalformed] (or, for a checkpoint chain, [ErrChain]). [Verify]
// and [VerifySession] return an error wrapping [ErrIncomplete], with their
// result, for an artifact that verifies but is incomplete.
package attest
