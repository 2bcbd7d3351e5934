// Package seccomp builds the system call filter the agent runs under.
//
// For most uses, call [Default] with the agent's bounding capability set: it
// returns the filter program, ready for the kernel, and its digest is
// [Program.SHA256]. The filter is Docker's default profile
// (github.com/moby/profiles/seccomp) resolved for those capabilities, with
// layerseal's additions ([Profile]), compiled by [Compile] to classic BPF
// for the native architecture.
//
// What the program promises, for every system call the agent makes:
//
//   - A call through another ABI than the native one (i386 or x32 on amd64,
//     32-bit ARM on arm64) kills the process: the tables are the native
//     ABI's only.
//   - A call with a number above every number the profile names returns
//     ENOSYS, so that a C library probing a newer call falls back.
//   - Otherwise the profile's rules for that call decide, in the order of
//     [Compile]; a call no rule allows returns the profile's default errno
//     (EPERM for the default profile).
//
// A call that the profile allows whatever its arguments is decided from its
// number and the architecture alone, without loading anything else of
// seccomp_data: since Linux 5.11 the kernel then allows it from a bitmap
// (its seccomp action cache) without running the program, so file reads,
// opens and stats pay only for a filter being there.
//
// Compile is pure and deterministic: the same profile and architecture give
// the same bytes, so a program compiled in one process can be checked by
// recompiling it in another.
package seccomp
