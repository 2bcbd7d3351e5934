package main

import (
	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/review"
)

// metaSuffix is what a change listing adds after e's path when e's
// metadata changed: a tab and the change (review.Meta's text: mode,
// uid, gid, ACL entries, xattrs by name, mtime when nothing else), or "".
func metaSuffix(e attest.Entry) string {
	m := review.Metadata(e)
	if m == nil {
		return ""
	}
	// Meta's text escapes what the agent chose; printable keeps it so.
	return "\t" + printable(m.String())
}
