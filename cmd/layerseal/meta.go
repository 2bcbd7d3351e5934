package main

import (
	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/review"
)

// metaSuffix is what a change listing adds after e's path when e's
// metadata changed (metaText of review.Metadata), or "".
func metaSuffix(e attest.Entry) string {
	return metaText(review.Metadata(e))
}

// differenceMeta is what changed in the metadata of a path between two
// points of a session (review.Metadata of its two states).
func differenceMeta(d attest.Difference) *review.Meta {
	return review.Metadata(attest.Entry{Path: d.Path, Change: d.Change, Old: d.From, New: d.To})
}

// metaText is a tab and m's text (mode, uid, gid, ACL entries, xattrs by
// name, mtime when nothing else), or "" for no change.
func metaText(m *review.Meta) string {
	if m == nil {
		return ""
	}
	// Meta's text escapes what the agent chose; printable keeps it so.
	return "\t" + printable(m.String())
}
