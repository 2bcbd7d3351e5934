package layerseal

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
	"github.com/layerseal/layerseal/overlay"
)

// ending is what is known of a session's end beyond its upper layer, for
// finishStatement: the run's own account when its supervisor made the
// statement, or what is left of it for Recover.
type ending struct {
	rec       sessionRecord
	launchEnv []byte               // the launch record's envelope file bytes
	launch    *attest.LaunchRecord // the same, verified
	ws        *os.File             // the workspace root, identified at launch
	exit      attest.Exit
	// reasons are the incomplete reasons only the ending knows: mounts
	// beneath the workspace (found at launch, or now), mounts the agent
	// made, processes that outlived it, an end not observed, a limit that
	// stopped it. The sandbox's, the workspace's identity and conflicts,
	// finishStatement finds itself.
	reasons []attest.Reason
	logs    []attest.OutputLog
	egress  []attest.Egress
	// known gives the digests the last checkpoint took (nil for none);
	// head is that checkpoint's envelope digest (nil when there is none).
	known    func(attest.Path, overlay.FileStat) []byte
	head     []byte
	key      *attest.Signer
	progress func(step string, p attest.Path)
}

// finishStatement makes, sweeps and signs the statement of a session
// whose agent is gone, for run and recover alike: the upper layer read
// under the launched policy (r), with the ending's account and the
// reasons every statement checks for itself (what the launch record says
// the sandbox lacked, a workspace path that no longer leads to the
// directory launched on, entries changed in the workspace since the
// launch). It returns the statement, the excluded
// subtrees the sweep summed up, and the signed envelope; it writes
// nothing.
func finishStatement(r *reader, e ending) (*attest.Statement, *subtrees, []byte, error) {
	progress := e.progress
	if progress == nil {
		progress = func(string, attest.Path) {}
	}
	reasons := append(append([]attest.Reason(nil), e.reasons...), e.launch.Sandbox.Reasons()...)
	if lowerMovedFrom(e.rec.Workspace, e.launch.Lower) {
		reasons = append(reasons, attest.Reason{Code: attest.LowerChanged,
			Detail: "the workspace directory is not the one the session started on"})
	}
	st, err := r.statement(e.known, func(p attest.Path) { progress("read", p) })
	if err != nil {
		return nil, nil, nil, fmt.Errorf("attest the change set: %w", err)
	}
	st.CheckpointHead = e.head
	st.SessionID = e.rec.ID
	st.Launch = sha(e.launchEnv)
	st.Exit = e.exit
	st.Logs = e.logs
	st.Egress = e.egress
	st.Incomplete = sortReasons(append(reasons, st.Incomplete...))
	progress("sweep", attest.Root)
	excluded, err := sweep(r, st)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("sweep protected paths: %w", err)
	}
	if c := conflicts(e.ws, statementPaths(st), launchedAt(e.rec, e.launch)); len(c) > 0 {
		st.Incomplete = sortReasons(append(st.Incomplete, conflictReasons(c)...))
	}
	progress("sign", attest.Root)
	b, err := signBounded(e.key, st, attest.MaxStatementSize)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("sign statement: %w", err)
	}
	return st, excluded, b, nil
}

// lowerMovedFrom reports whether the path ws no longer leads to the
// directory the launch record pinned as the lower layer.
func lowerMovedFrom(ws string, lower attest.LowerIdentity) bool {
	now, err := linux.Lstat(unix.AT_FDCWD, ws)
	return err != nil || now.Dev != lower.Dev || now.Ino != lower.Ino ||
		now.HasMountID && lower.MountIDKnown && now.MountID != lower.MountID
}

// launchedAt is the time workspace entries are compared with to find
// conflicts: the session record's, or the signed launch time for a record
// that has none.
func launchedAt(rec sessionRecord, launch *attest.LaunchRecord) time.Time {
	if rec.Launched != 0 {
		return time.Unix(0, rec.Launched)
	}
	return launch.Started
}
