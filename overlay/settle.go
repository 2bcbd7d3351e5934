package overlay

import (
	"time"

	"github.com/layerseal/layerseal/internal/linux"
)

// settle waits, when st's ctime lies within window of now, until window
// has passed since it. A write that starts after that is stamped with a
// later ctime (file times advance in clock ticks shorter than window), so
// the stat checks around the read that follows catch it. Only ctime
// counts: every change of content, mode, owner, times or xattrs sets it
// to the current time, and unlike mtime no one can set it to another.
func settle(st linux.Stat, window time.Duration) {
	if wait := time.Duration(st.CtimeNS+int64(window)) - time.Duration(time.Now().UnixNano()); wait > 0 {
		time.Sleep(min(wait, window))
	}
}
