package layerseal

import (
	"testing"
	"time"
)

// TestPacer: the watcher looks every maxPoll when a limit is far, as
// often as minPoll when the writes would reach it soon at the least rate
// it assumes or at a faster rate it measured, and never more often than
// pollCostShare times what a look cost.
func TestPacer(t *testing.T) {
	var p pacer
	p.pace(0, 10<<30, 0)
	if p.next != maxPoll {
		t.Errorf("10 GiB from the limit: next look in %v, want %v", p.next, maxPoll)
	}
	p.pace(0, 4<<20, 0)
	if want := time.Duration(float64(4<<20) / assumedRate / pollHeadroomBy * float64(time.Second)); p.next != max(want, minPoll) {
		t.Errorf("4 MiB from the limit: next look in %v, want %v", p.next, max(want, minPoll))
	}
	p.pace(0, 1<<10, 0)
	if p.next != minPoll {
		t.Errorf("1 KiB from the limit: next look in %v, want %v", p.next, minPoll)
	}
	// A measured rate faster than the one assumed: 4 GiB in 100 ms.
	p = pacer{at: time.Now().Add(-100 * time.Millisecond)}
	p.pace(4<<30, 1<<30, 0)
	if p.next > 20*time.Millisecond {
		t.Errorf("1 GiB from the limit at 40 GiB/s: next look in %v, want at most 20ms", p.next)
	}
	p.pace(4<<30, 1<<10, 50*time.Millisecond)
	if p.next != pollCostShare*50*time.Millisecond {
		t.Errorf("a look that cost 50ms: next in %v, want %v", p.next, pollCostShare*50*time.Millisecond)
	}
}
