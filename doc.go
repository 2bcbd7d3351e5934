// Package layerseal runs an untrusted agent over a workspace and answers,
// with signed evidence, what it changed on disk.
//
// The agent runs in private mount and PID namespaces in which the workspace
// is an overlayfs mount: the real workspace is the read-only lower layer and
// a fresh directory in layerseal's state dir is the upper layer, which
// therefore receives the complete change set. For most uses, call [Run]: it
// pins the signing key, writes a signed launch record before the agent
// starts, runs the agent, signs a change statement of the upper layer
// classified against the lower one, and applies the change set to the
// workspace — unless the run had violations, a failure or an interrupt,
// or someone else changed the same paths meanwhile (conflicts): then the
// change set stays staged. A [Store] owns the state dir (open it with
// [OpenStore]) and the sessions' life after the run: [Store.Apply] applies
// a staged change set (path by path where there are conflicts) or finishes
// an apply that stopped part way; [Store.Discard] drops one;
// [Store.Sessions] lists them and [Store.Prune] removes finished ones. A
// session holds a lock on its workspace for as long as it runs.
//
// The packages beneath do one job each: attest (formats, signing and
// verification; pure Go), overlay (mounting, reading and applying an upper
// layer), nsrun (the namespaces and the agent process) and probe (what the
// kernel can do, found by trying).
package layerseal
