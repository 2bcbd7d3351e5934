package overlay

import (
	"time"

	"github.com/layerseal/layerseal/internal/linux"
)

// settle waits, when st's ctime lies within window of now on the coarse
// clock file times are stamped with, until window has passed since it (for
// at most a second, should that clock stall). A write that starts after
// that is stamped with a later ctime, so the stat checks around the read
// that follows catch it. Only ctime counts: every change of content, mode,
// owner, times or xattrs sets it to the current time, and unlike mtime no
// one can set it to another.
func settle(st linux.Stat, window time.Duration) {
	deadline := time.Now().Add(time.Second)
	for linux.CoarseNow().UnixNano()-st.CtimeNS < int64(window) && time.Now().Before(deadline) {
		time.Sleep(window / 4)
	}
}
