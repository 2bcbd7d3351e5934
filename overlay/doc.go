// Package overlay describes and mounts the workspace overlay with pinned
// options, reads its upper layer into a change list, and applies a change
// set to a target.
//
// # Where to start
//
// After the agent has exited, call Read with the upper and lower
// directories: it returns the Changes (entries sorted by path, and the
// reasons the list is incomplete, if any). Read never signs anything; the
// attest package turns Changes into a statement.
//
// # What Read promises
//
// The overlay must have been mounted with redirect_dir=nofollow,
// metacopy=off, index=off, nfs_export=off, xino=off, uuid=null onto fresh
// upper and work directories. Read fails with ErrForeignUpper on anything
// those options cannot produce. Otherwise, with ns the private xattr
// namespace ("trusted", or "user" for a userxattr mount), P an upper path
// and L the same path in the lower layer:
//
//   - A char device 0:0 is a whiteout: P is deleted if L exists, with every
//     entry beneath L when L is a directory; nothing if L is absent.
//     Whiteouts share one inode and are never hard links.
//   - A directory with ns.overlay.opaque="y": added if L is absent, a type
//     change if L is not a directory, else replaced; then every lower
//     child missing from the upper directory is deleted and the rest are
//     classified by these rules.
//   - Any other directory: added if L is absent (with its children), a
//     type change if L is not a directory; otherwise listed (metadata) only
//     when mode, owner, mtime or user xattrs differ, so directories copied
//     up only to hold a child are not listed.
//   - A non-directory: added if L is absent; a type change if L has
//     another type (a lower directory's subtree is then deleted); modified
//     if the content differs (size, then SHA-256; symlink target; rdev);
//     metadata if only mode, owner, mtime or user xattrs differ; otherwise
//     not listed. ctime, btime, inode numbers, nlink and blocks are ignored.
//   - The upper root is compared with the lower root as path ".".
//   - Upper regular files sharing an inode carry State.Link, the smallest
//     path of their group (the entry's own path when it is the smallest).
//   - User xattrs exclude overlay's private ns.overlay.* ones; the escaped
//     ns.overlay.overlay.X is reported as ns.overlay.X.
//
// A lower entry that is itself a whiteout is treated as absent, as the
// overlay shows it. Everything Read could not examine is an
// attest.Reason in Changes.Incomplete, never a silently shorter list:
// a missing root, other mounts, unreadable or vanished entries, files over
// the digest cap, exhausted budgets, directories over the entry limit,
// and walks without mount IDs.
package overlay
