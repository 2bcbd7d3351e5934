package layerseal

import (
	"runtime/debug"
	"testing"
)

// TestLeanGC: a walk lowers the collector's target to walkGCPercent and
// puts back what was set; a lower target is left alone.
func TestLeanGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	restore := leanGC()
	if got := debug.SetGCPercent(walkGCPercent); got != walkGCPercent {
		t.Errorf("during a walk GOGC is %d, want %d", got, walkGCPercent)
	}
	restore()
	if got := debug.SetGCPercent(10); got != 100 {
		t.Errorf("after a walk GOGC is %d, want 100 again", got)
	}
	restore = leanGC()
	if got := debug.SetGCPercent(10); got != 10 {
		t.Errorf("a walk raised GOGC from 10 to %d", got)
	}
	restore()
	if got := debug.SetGCPercent(10); got != 10 {
		t.Errorf("after a walk GOGC is %d, want 10", got)
	}
}
