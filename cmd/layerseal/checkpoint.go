package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/urfave/cli/v3"

	"github.com/layerseal/layerseal"
	"github.com/layerseal/layerseal/attest"
)

func checkpointCommand() *cli.Command {
	return &cli.Command{
		Name:      "checkpoint",
		Usage:     "ask a running session to take a checkpoint now (as SIGUSR1 to its supervisor does)",
		ArgsUsage: "OUT|SESSION-ID",
		Flags:     []cli.Flag{stateDirFlag()},
		Action: func(_ context.Context, cmd *cli.Command) error {
			if cmd.NArg() != 1 {
				return usageErr("usage: layerseal checkpoint OUT|SESSION-ID")
			}
			if err := needRoot("checkpoint"); err != nil {
				return err
			}
			res, err := storeOf(cmd).RequestCheckpoint(cmd.Args().First())
			if err != nil {
				return exitWith(exitFailed, err)
			}
			state := fmt.Sprintf("%d change(s)", res.Count)
			if res.Unchanged {
				state = "unchanged, " + state
			}
			if !res.Complete {
				state += ", INCOMPLETE"
			}
			fmt.Printf("checkpoint %d: %s\t%s\n", res.Seq, state, res.File)
			return nil
		},
	}
}

// artifact is a checkpoint or a final statement, as diff and verify read
// them.
type artifact struct {
	path    string
	env     []byte
	session string
	launch  []byte
	entries []attest.Entry
	cp      *attest.Checkpoint // nil for a statement
	st      *attest.Statement  // nil for a checkpoint
}

// readAny reads path as a checkpoint or a statement, verifying it with
// pub when pub is not nil. A checkpoint gets all its changes, resolved
// through the checkpoints before it in the same directory (an unchanged
// one repeats a list, and one that walked after another lists only its
// difference).
func readAny(path string, pub []byte) (*artifact, error) {
	env, err := readArtifact(path)
	if err != nil {
		return nil, err
	}
	a := &artifact{path: path, env: env}
	if cp, cerr := attest.ReadCheckpoint(env); cerr == nil {
		cps, all, err := readChain(path, env, cp.Seq, pub, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		cp = cps[len(cps)-1]
		a.cp, a.session, a.launch, a.entries = cp, cp.SessionID, cp.Launch, all
		return a, nil
	}
	var st *attest.Statement
	if pub != nil {
		st, err = attest.VerifyStatement(env, pub, nil)
	} else {
		st, err = attest.ReadStatement(env)
	}
	if err != nil {
		return nil, fmt.Errorf("%s is neither a checkpoint nor a statement: %w", path, err)
	}
	a.st, a.session, a.launch, a.entries = st, st.SessionID, st.Launch, st.Entries
	return a, nil
}

// diffArtifacts is `diff A B`: what changed in the merged view between
// two checkpoints of one session, or a checkpoint and the final
// statement.
func diffArtifacts(cmd *cli.Command) error {
	var pub []byte
	if k := cmd.String("key"); k != "" {
		p, err := attest.LoadPublicKey(k)
		if err != nil {
			return exitWith(exitUsage, err)
		}
		pub = p
	}
	a, err := readAny(cmd.Args().Get(0), pub)
	if err != nil {
		return exitWith(exitFailed, err)
	}
	b, err := readAny(cmd.Args().Get(1), pub)
	if err != nil {
		return exitWith(exitFailed, err)
	}
	if a.session != b.session || !bytes.Equal(a.launch, b.launch) {
		return exitWith(exitFailed, fmt.Errorf("%s is of session %s and %s of session %s: diff compares two points of one session", a.path, a.session, b.path, b.session))
	}
	changes := diffEntries(a.entries, b.entries)
	if cmd.Bool("json") {
		out := make([]changeJSON, 0, len(changes))
		for _, c := range changes {
			out = append(out, c)
		}
		printJSON(map[string]any{"session_id": a.session, "verified": pub != nil, "from": a.path, "to": b.path, "changes": out})
		return nil
	}
	writeDiff(os.Stdout, changes, pub != nil)
	return nil
}

func writeDiff(w io.Writer, changes []changeJSON, verified bool) {
	for _, c := range changes {
		fmt.Fprintf(w, "%s  %s\n", shortCode[c.Change], c.Path)
	}
	state := "signatures not checked (use --key)"
	if verified {
		state = "verified"
	}
	fmt.Fprintf(w, "# %d change(s) between them, %s\n", len(changes), state)
}

// diffEntries compares two change lists of one session (each against the
// same lower layer): a path listed in neither is as in the lower layer in
// both; a path listed in one only is as in the lower layer in the other.
// Each path whose merged-view state differs gets the change from the
// first state to the second.
func diffEntries(from, to []attest.Entry) []changeJSON {
	var out []changeJSON
	i, j := 0, 0
	for i < len(from) || j < len(to) {
		var a, b *attest.Entry
		switch {
		case j >= len(to) || i < len(from) && from[i].Path < to[j].Path:
			a = &from[i]
			i++
		case i >= len(from) || to[j].Path < from[i].Path:
			b = &to[j]
			j++
		default:
			a, b = &from[i], &to[j]
			i, j = i+1, j+1
		}
		var lower, sa, sb *attest.State
		var p attest.Path
		if a != nil {
			lower, p = a.Old, a.Path
		} else {
			lower, p = b.Old, b.Path
		}
		sa, sb = lower, lower
		if a != nil {
			sa = a.New
		}
		if b != nil {
			sb = b.New
		}
		c := changeJSON{Path: p}
		switch {
		case sa == nil && sb == nil:
			continue
		case sa == nil:
			c.Change, c.Type = attest.Added, sb.Type
		case sb == nil:
			c.Change, c.Old = attest.Deleted, sa.Type
		case sa.Type != sb.Type:
			c.Change, c.Type, c.Old = attest.TypeChange, sb.Type, sa.Type
		case contentDiffers(sa, sb):
			c.Change, c.Type, c.Old = attest.Modified, sb.Type, sa.Type
		case metaDiffers(sa, sb):
			c.Change, c.Type, c.Old = attest.Metadata, sb.Type, sa.Type
		case b != nil && b.Change == attest.Replaced && (a == nil || a.Change != attest.Replaced):
			c.Change, c.Type, c.Old = attest.Replaced, sb.Type, sa.Type
		default:
			continue
		}
		out = append(out, c)
	}
	return out
}

// contentDiffers compares what two states of one type hold. Without both
// digests, files of equal size are compared by mtime.
func contentDiffers(a, b *attest.State) bool {
	switch a.Type {
	case attest.File:
		if a.Size != b.Size {
			return true
		}
		if a.SHA256 != nil && b.SHA256 != nil {
			return !bytes.Equal(a.SHA256, b.SHA256)
		}
		return a.MtimeNS != b.MtimeNS
	case attest.Symlink:
		return a.Target != b.Target
	case attest.CharDev, attest.BlockDev:
		return a.Rdev != b.Rdev
	}
	return false
}

func metaDiffers(a, b *attest.State) bool {
	return a.Mode != b.Mode || a.UID != b.UID || a.GID != b.GID || a.MtimeNS != b.MtimeNS || a.Link != b.Link ||
		!slices.EqualFunc(a.Xattrs, b.Xattrs, func(x, y attest.Xattr) bool { return x.Name == y.Name && bytes.Equal(x.Value, y.Value) })
}

// chainUpTo reads checkpoints 1..n of dir, in order.
func chainUpTo(dir string, n uint64) ([][]byte, error) {
	var envs [][]byte
	for i := uint64(1); i <= n; i++ {
		b, err := readArtifact(filepath.Join(dir, layerseal.CheckpointFile(i)))
		if err != nil {
			return nil, fmt.Errorf("%w: checkpoint %d: %v", attest.ErrChain, i, err)
		}
		envs = append(envs, b)
	}
	return envs, nil
}

// chainIn reads every checkpoint of dir, refusing gaps: files must be
// 000001.json up to the last one.
func chainIn(dir string) ([][]byte, error) {
	names, err := filepath.Glob(filepath.Join(dir, "[0-9]*.json"))
	if err != nil {
		return nil, err
	}
	envs, err := chainUpTo(dir, uint64(len(names)))
	if err != nil {
		return nil, err
	}
	for i, n := range names {
		if filepath.Base(n) != layerseal.CheckpointFile(uint64(i+1)) {
			return nil, fmt.Errorf("%w: %s is not checkpoint %d", attest.ErrChain, n, i+1)
		}
	}
	return envs, nil
}

// readChain reads checkpoints 1 to seq from the directory of path, whose
// envelope file env must be the last of them, verified with pub (when not
// nil) as a chain bound to launch (when not nil), and returns them and all
// the changes of the last.
func readChain(path string, env []byte, seq uint64, pub, launch []byte) ([]*attest.Checkpoint, []attest.Entry, error) {
	envs, err := chainUpTo(filepath.Dir(path), seq)
	if err != nil {
		return nil, nil, err
	}
	if !bytes.Equal(envs[len(envs)-1], env) {
		return nil, nil, fmt.Errorf("%w: %s is not the checkpoint %d of its directory", attest.ErrChain, path, seq)
	}
	if pub != nil {
		return attest.VerifyChain(envs, pub, launch)
	}
	cps := make([]*attest.Checkpoint, len(envs))
	for i, env := range envs {
		if cps[i], err = attest.ReadCheckpoint(env); err != nil {
			return nil, nil, fmt.Errorf("checkpoint %d: %w", i+1, err)
		}
	}
	all, err := attest.ChangesOf(cps)
	return cps, all, err
}

// verifyCheckpointFile is `verify` of a checkpoint: its signature and its
// log head, and the chain before it in the same directory.
func verifyCheckpointFile(cmd *cli.Command, pub []byte, path string, env []byte, cp *attest.Checkpoint, launch []byte) error {
	cps, _, err := readChain(path, env, cp.Seq, pub, launch)
	if err == nil {
		cp = cps[len(cps)-1]
	}
	if err != nil {
		if cmd.Bool("json") {
			printJSON(map[string]any{"verified": false, "error": verifyClass(err), "detail": err.Error()})
		}
		return exitWith(exitFailed, fmt.Errorf("%s: %w", path, err))
	}
	if cmd.Bool("json") {
		printJSON(map[string]any{"verified": true, "checkpoint": cp.Seq, "complete": cp.Complete, "unchanged": cp.Unchanged,
			"session_id": cp.SessionID, "count": cp.Count, "incomplete": reasonsJSON(cp.Incomplete), "launch_checked": launch != nil})
	} else {
		state := ""
		switch {
		case cp.Unchanged:
			state = fmt.Sprintf(", unchanged since checkpoint %d", cp.SameAs)
		case cp.Base != 0:
			state = fmt.Sprintf(", %d change(s) listed since checkpoint %d", len(cp.Entries)+len(cp.Removed), cp.Base)
		}
		fmt.Printf("verified: checkpoint %d of %d in its chain%s, %s, %d change(s), session %s\n",
			cp.Seq, cp.Log.Size, state, completenessOf(cp.Complete, len(cp.Incomplete)), cp.Count, cp.SessionID)
		for _, r := range cp.Incomplete {
			fmt.Printf("incomplete: %s\n", reasonText(r))
		}
	}
	if !cp.Complete {
		return exitWith(exitIncomplete, nil)
	}
	return nil
}

// verifyStatementChain checks a verified statement against the checkpoint
// chain in dir ("" when none was given and none lies beside the
// statement). It returns what to say about the chain.
func verifyStatementChain(st *attest.Statement, pub []byte, dir string, launch []byte) (string, error) {
	if dir == "" {
		if st.CheckpointHead != nil {
			return "checkpoint chain not checked (no checkpoints dir beside the statement; use --checkpoints)", nil
		}
		return "", nil
	}
	envs, err := chainIn(dir)
	if err != nil {
		return "", err
	}
	cps, _, err := attest.VerifyChain(envs, pub, launch)
	if err != nil {
		return "", err
	}
	var last []byte
	var lastCP *attest.Checkpoint
	if len(envs) > 0 {
		last, lastCP = envs[len(envs)-1], cps[len(cps)-1]
	}
	if err := attest.CheckStatementHead(st, last, lastCP); err != nil {
		return "", err
	}
	if len(envs) == 0 {
		return "", nil
	}
	return fmt.Sprintf("checkpoint chain: %d checkpoint(s), bound to the statement", len(envs)), nil
}

func verifyClass(err error) string {
	if errors.Is(err, attest.ErrMalformed) {
		return "malformed"
	}
	if errors.Is(err, attest.ErrChain) {
		return "chain"
	}
	return "not-verified"
}

func completenessOf(complete bool, n int) string {
	if complete {
		return "complete"
	}
	return fmt.Sprintf("INCOMPLETE (%d reason(s))", n)
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
