// Package tlog is layerseal's transparency log of signed heads: an
// append-only C2SP tlog-tiles log (built on tessera) whose entries are the
// exact envelope files of heads (attest.Head), whose checkpoints are signed
// notes of the log's own key, and which witnesses cosign (C2SP
// tlog-cosignature) after checking that it only grew.
//
// Where to start: InitPOSIX makes a log in a directory, Open appends to it
// (Log), Anchor appends a session's heads and writes a Receipt beside each,
// VerifyReceipt checks one offline, Check monitors a whole log and Cosign
// is one witness step. OpenReader reads a log from a directory or from an
// http(s):// URL, since the tiles are static files any server can serve.
//
// Promises: a receipt verifies only when its entry is included in a
// checkpoint signed by the log's key (and cosigned by as many of the given
// witnesses as asked); a witness never signs a checkpoint that is not
// consistent with the last one it signed, and never moves its state back.
package tlog
