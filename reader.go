package layerseal

import (
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/overlay"
	"github.com/layerseal/layerseal/policy"
)

// reader reads one session's upper layer against its lower layer (the
// workspace, not mounted) under the session's policy: it is built once per
// session, with the policy's globs compiled once and the mount-ID
// capability the probe found, and every read of the upper layer goes
// through it (the final walk, the sweep, recover, apply and checkpoints).
type reader struct {
	upper, work string
	lower       string   // the workspace path; names the lower layer
	lowerDir    *os.File // the workspace root as opened and identified; nil: lower's path
	policy      attest.Policy
	rules       *policy.Rules
	noMountID   bool
}

// onRead, when set (tests), is called for every read of an upper layer.
var onRead func()

// newReader compiles p's globs and returns the reader of a session.
func newReader(upper, work, lower string, lowerDir *os.File, p attest.Policy, noMountID bool) (*reader, error) {
	rules, err := rulesOf(p)
	if err != nil {
		return nil, err
	}
	return &reader{upper: upper, work: work, lower: lower, lowerDir: lowerDir, policy: p, rules: rules, noMountID: noMountID}, nil
}

// sessionReader is the reader of the session in d, whose workspace is
// ws (opened as wsDir), under the launched policy p; the mount-ID
// capability is probed.
func sessionReader(d sessionDir, ws string, wsDir *os.File, p attest.Policy) (*reader, error) {
	features, err := detectFeatures(d.stateDir())
	if err != nil {
		return nil, err
	}
	return newReader(d.upper(), d.work(), ws, wsDir, p, !features.StatxMountID.OK())
}

// options are the options of a read under the session's policy, its time
// budget starting now.
func (r *reader) options() overlay.ReadOptions {
	opt := overlay.ReadOptions{
		Exclude:       r.rules.Excluded,
		DigestCap:     r.policy.DigestCap,
		MaxEntries:    r.policy.MaxEntries,
		MaxDirEntries: r.policy.MaxDirEntries,
		NoMountID:     r.noMountID,
		WorkDir:       r.work,
		LowerDir:      r.lowerDir,
	}
	if r.policy.TimeBudget > 0 {
		opt.Deadline = time.Now().Add(r.policy.TimeBudget)
	}
	return opt
}

// read reads the upper layer with opt (see overlay.Read).
func (r *reader) read(opt overlay.ReadOptions) (*overlay.Changes, error) {
	if onRead != nil {
		onRead()
	}
	return overlay.Read(r.upper, r.lower, opt)
}

// readChanged reads again only what changed since prev (see
// overlay.ReadChanged).
func (r *reader) readChanged(prev *overlay.Changes, changed func(attest.Path) bool, opt overlay.ReadOptions) (*overlay.Changes, error) {
	if onRead != nil {
		onRead()
	}
	return overlay.ReadChanged(r.upper, r.lower, prev, changed, opt)
}

// statement reads the upper layer and returns an unsigned statement of
// it: entries, excluded subtrees and the reader's incomplete reasons. It
// takes known digests of upper files (see overlay.ReadOptions.KnownDigest)
// where known is not nil, and calls progress (when not nil) with each
// entry read.
func (r *reader) statement(known func(attest.Path, overlay.FileStat) []byte, progress func(attest.Path)) (*attest.Statement, error) {
	opt := r.options()
	opt.KnownDigest, opt.Progress = known, progress
	ch, err := r.read(opt)
	if err != nil {
		return nil, err
	}
	return statementOf(r.lower, ch), nil
}

func statementOf(lower string, ch *overlay.Changes) *attest.Statement {
	return &attest.Statement{
		Workspace:  attest.Bytes(lower),
		Incomplete: ch.Incomplete,
		Entries:    ch.Entries,
		Excluded:   ch.Excluded,
		Ended:      time.Now().UTC(),
		Stats: attest.Stats{
			UpperEntries: uint64(ch.Stats.UpperEntries),
			LowerEntries: uint64(ch.Stats.LowerEntries),
			BytesHashed:  ch.Stats.BytesHashed,
		},
	}
}

// reread reads the upper layer again after st was made from it (and the
// sweep changed it) and returns the change set as a read under the
// policy would list it. When st has excluded subtrees it reads them in
// full (no exclusion) and also returns their entries, which an apply
// needs: one read serves both. An entry beneath an excluded subtree is
// listed (not excluded) when st itemized it.
func (r *reader) reread(st *attest.Statement) (listed, excluded []attest.Entry, err error) {
	opt := r.options()
	if len(st.Excluded) > 0 {
		opt.Exclude = nil
	}
	ch, err := r.read(opt)
	if err != nil {
		return nil, nil, err
	}
	if len(st.Excluded) == 0 {
		return ch.Entries, nil, nil
	}
	itemized := make(map[attest.Path]bool)
	for _, e := range st.Entries {
		itemized[e.Path] = true
	}
	listed = []attest.Entry{}
	for _, e := range ch.Entries {
		if !itemized[e.Path] && inExcluded(e.Path, st.Excluded) {
			excluded = append(excluded, e)
		} else {
			listed = append(listed, e)
		}
	}
	return listed, excluded, nil
}

// subtrees holds the entries of a statement's excluded subtrees, once a
// read of the session has listed them.
type subtrees struct {
	entries []attest.Entry
}

// excludedEntries reads the entries of st's excluded subtrees again for a
// later apply: it checks first that they still hold what st counted, then
// reads them in full.
func (r *reader) excludedEntries(st *attest.Statement) ([]attest.Entry, error) {
	again, err := r.statement(nil, nil)
	if err != nil {
		return nil, err
	}
	if !slices.Equal(again.Excluded, st.Excluded) {
		return nil, fmt.Errorf("%w: the excluded subtrees no longer hold the entries the statement counted", overlay.ErrNotAttested)
	}
	_, excluded, err := r.reread(st)
	return excluded, err
}

// inExcluded reports whether p is an excluded subtree or lies beneath one.
func inExcluded(p attest.Path, xs []attest.Excluded) bool {
	for _, x := range xs {
		if attest.Within(p, x.Path) {
			return true
		}
	}
	return false
}
