package overlay

import (
	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
)

// summarize records the upper entry name of u at p, and everything beneath
// it, as one excluded subtree: entries are counted (each charged to the
// entry budget) and regular files' sizes summed, but nothing is classified
// or hashed. A whiteout counts as one entry: the deletion of whatever the
// lower layer holds there. Entries on other mounts and unreadable or
// over-limit directories add their usual reasons.
func (r *reader) summarize(p attest.Path, name string, u node) {
	x := attest.Excluded{Path: p}
	r.countTree(&x, p, name, u)
	if x.Entries > 0 {
		r.excluded = append(r.excluded, x)
	}
}

func (r *reader) countTree(x *attest.Excluded, p attest.Path, name string, u node) {
	if !r.count(p, &r.stats.UpperEntries) {
		return
	}
	st, err := u.lstat(name)
	if err != nil {
		r.fault(p, "upper", err)
		return
	}
	if !r.onMount(st, r.upperRoot) {
		r.reason(attest.OtherMount, p, "upper entry is on another mount: excluded with its subtree")
		return
	}
	x.Entries++
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		x.Bytes += st.Size
		return
	case unix.S_IFDIR:
	default:
		return
	}
	d, err := u.open(name, st)
	if err != nil {
		r.fault(p, "upper", err)
		return
	}
	defer d.close()
	names, ok := r.list(p, "upper", d)
	if !ok {
		return
	}
	for _, c := range names {
		if r.stopped {
			return
		}
		r.countTree(x, join(p, c), c, d)
	}
}
