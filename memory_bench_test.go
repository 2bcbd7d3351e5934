package layerseal

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"testing"
)

// BenchmarkPeakRSS reports the supervisor's peak resident memory over an
// upper layer of 1,000,000 entries (10,000 under -short), as benchUpper
// leaves it after the first checkpoint: for an idle checkpoint, and for
// the final walk with nothing reused (classify, hash, build the
// statement). The peak is the process's VmHWM, reset before each through
// /proc/self/clear_refs after a collection, so it includes what the
// session holds between checkpoints ("held-MiB", the heap in use before
// each) and everything else in the process, as a real supervisor's would;
// "rss-before" is the resident memory it starts from.
func BenchmarkPeakRSS(b *testing.B) {
	n := 1_000_000
	if testing.Short() {
		n = 10_000
	}
	cp, _ := benchUpper(b, n)
	measure := func(b *testing.B, f func() error) {
		for b.Loop() {
			runtime.GC()
			debug.FreeOSMemory()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
				b.Fatal(err)
			}
			before := vmHWM(b)
			if err := f(); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(vmHWM(b))/(1<<20), "peak-MiB")
			b.ReportMetric(float64(before)/(1<<20), "rss-before-MiB")
			b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "held-MiB")
		}
	}
	b.Run(fmt.Sprintf("entries=%d/idle-checkpoint", n), func(b *testing.B) {
		measure(b, func() error {
			res, err := cp.take()
			if err == nil && !res.Unchanged {
				err = fmt.Errorf("idle checkpoint saw a change: %+v", res)
			}
			return err
		})
	})
	b.Run(fmt.Sprintf("entries=%d/final-walk", n), func(b *testing.B) {
		measure(b, func() error {
			st, err := cp.r.statement(nil, nil)
			if err == nil && len(st.Entries) != n {
				err = fmt.Errorf("%d entries, want %d", len(st.Entries), n)
			}
			return err
		})
	})
}

// vmHWM returns the process's peak resident set size in bytes.
func vmHWM(b *testing.B) int64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for line := range bytes.Lines(status) {
		if v, ok := bytes.CutPrefix(line, []byte("VmHWM:")); ok {
			kb, err := strconv.ParseInt(string(bytes.Fields(v)[0]), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatal("no VmHWM in /proc/self/status")
	return 0
}
