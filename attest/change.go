package attest

// Path is a Linux path relative to the workspace root, held as raw bytes in a
// Go string: components separated by '/', no leading or trailing '/', no empty,
// "." or ".." components, and no NUL. The workspace root itself is ".".
// Paths sort by their bytes. In JSON a Path has exactly one spelling (see
// MarshalText in path.go).
type Path string

// Root is the Path of the workspace root.
const Root Path = "."

// Change is how one path differs between the lower layer (the workspace before
// the run) and the merged view the agent left.
type Change string

const (
	Added      Change = "added"      // absent in the lower layer
	Modified   Change = "modified"   // content differs (size, digest, symlink target or rdev)
	Metadata   Change = "metadata"   // only mode, owner, mtime or user xattrs differ
	Deleted    Change = "deleted"    // present in the lower layer, gone now
	Replaced   Change = "replaced"   // a directory removed and made again (opaque)
	TypeChange Change = "typechange" // the path holds another type of file now
)

// Type is the type of a file.
type Type string

const (
	File     Type = "file"
	Dir      Type = "dir"
	Symlink  Type = "symlink"
	FIFO     Type = "fifo"
	Socket   Type = "socket"
	CharDev  Type = "char"
	BlockDev Type = "block"
)

// State is what one path holds: in the merged view after the run (Entry.New) or
// in the lower layer before it (Entry.Old).
type State struct {
	Type    Type
	Mode    uint32 // permission bits and setuid/setgid/sticky (07777)
	UID     uint32
	GID     uint32
	Size    uint64 // regular files and symlinks; 0 otherwise
	MtimeNS int64  // nanoseconds since the Unix epoch
	// SHA256 is the digest of a regular file's contents; nil when it was not
	// read (over the digest cap, unreadable, or not a regular file).
	SHA256 []byte
	Target Path   // symlink target bytes (any bytes but NUL; may be absolute)
	Rdev   uint64 // device number of char and block devices
	// Xattrs are the user-visible extended attributes (overlay's private
	// ones removed, escaped ones unescaped), sorted by name.
	Xattrs []Xattr
	// Link, for a regular file that shares its inode with other upper-layer
	// paths, is the smallest such path (which may itself be unchanged and so
	// not listed). Empty when the file has no other link in the upper layer.
	Link Path
}

// Xattr is one extended attribute.
type Xattr struct {
	Name  string // raw bytes
	Value []byte
}

// Entry is one changed path: one leaf of a statement's Merkle tree.
type Entry struct {
	Path   Path
	Change Change
	// Old is the lower layer's state; nil for Added. Its SHA256 is set only
	// when the reader had to hash the lower file to classify the entry.
	Old *State
	// New is the merged view's state; nil for Deleted.
	New *State
}

// Code is the stable, machine-readable reason a statement is incomplete.
type Code string

const (
	NoMountID     Code = "no-mount-id"     // kernel lacks statx mount IDs; mounts told apart by st_dev only
	OtherMount    Code = "other-mount"     // entry on another mount, excluded with its subtree
	Submount      Code = "submount"        // a mount under the workspace that the overlay cannot cover
	Unreadable    Code = "unreadable"      // entry or subtree could not be read
	Vanished      Code = "vanished"        // entry vanished or was swapped while being read
	DigestCap     Code = "digest-cap"      // file over the digest cap: compared by size and mtime only
	EntryBudget   Code = "entry-budget"    // entry budget exhausted; the rest was not examined
	TimeBudget    Code = "time-budget"     // time budget exhausted; the rest was not examined
	DirEntryLimit Code = "dir-entry-limit" // directory over the per-directory entry limit
	RootMissing   Code = "root-missing"    // upper or lower root missing
	LowerChanged  Code = "lower-changed"   // the lower layer changed under the session
	AgentMount    Code = "agent-mount"     // the agent created or changed mounts inside the workspace
	AgentOutlived Code = "agent-outlived"  // processes outlived the agent's main process
	CapSysAdmin   Code = "cap-sys-admin"   // the agent held CAP_SYS_ADMIN and could rearrange its mounts
	UnobservedEnd Code = "unobserved-end"  // the supervisor did not observe the end of the run
	Unstable      Code = "unstable"        // a file changed while a checkpoint hashed it (the agent was running)
	// SandboxWeakened: a restriction of the sandbox could not be put in
	// place on this kernel or host (see Sandbox.Missing).
	SandboxWeakened Code = "sandbox"
	PathLimit       Code = "path-limit" // a path over the length limit (its subtree) or past the total path bytes budget (the rest) was not examined
	// Conflict: the workspace entry at the path (or its directory, for an
	// entry created or removed) changed after the launch, by someone other
	// than the agent: its "old" state is what the workspace held when it
	// was read, not necessarily the launch-time state, and applying would
	// overwrite that edit.
	Conflict Code = "conflict"
	// UpperLimit: the agent was stopped because its upper layer reached
	// the policy's MaxUpper, or the state dir's filesystem fell under its
	// MinFree reserve; the statement is of what it wrote until then.
	UpperLimit Code = "upper-limit"
)

// Unexamined reports whether a reason with code c means part of the upper
// layer was not read: applying the statement does not carry all of it
// over, so such a change set is never applied automatically.
func (c Code) Unexamined() bool {
	switch c {
	case Unreadable, Vanished, EntryBudget, TimeBudget, DirEntryLimit, RootMissing, OtherMount, PathLimit:
		return true
	}
	return false
}

// Transient reports whether a reason with code c is about one path that
// could not be read this time (a read error, an entry that vanished or
// changed while read): reading that path again may succeed.
func (c Code) Transient() bool {
	switch c {
	case Unstable, Vanished, Unreadable:
		return true
	}
	return false
}

// Cut reports whether a reason with code c means the read was cut short
// by a budget or limit: what it did not reach is unknown, so only a read
// from scratch can find it.
func (c Code) Cut() bool {
	switch c {
	case TimeBudget, EntryBudget, PathLimit:
		return true
	}
	return false
}

// Reason is one place a statement could not look.
type Reason struct {
	Code   Code
	Path   Path   // empty when no single path applies
	Detail string // human-readable explanation
}
