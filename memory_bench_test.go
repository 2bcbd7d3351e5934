package layerseal

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"testing"
	"time"

	"github.com/layerseal/layerseal/attest"
)

// BenchmarkPeakRSS reports the supervisor's peak resident memory over an
// upper layer of 1,000,000 entries (10,000 under -short), as benchUpper
// leaves it after the first checkpoint: for an idle checkpoint, and for
// the final walk with nothing reused (classify, hash, build the
// statement), and that walk followed by signing the statement as the
// session does (its envelope built in memory as one message, listing
// fewer entries when it would outgrow what verify reads), which is where
// a session's end peaks. The peak is the process's VmHWM, reset before each through
// /proc/self/clear_refs after a collection, so it includes what the
// session holds between checkpoints ("held-MiB", the heap in use before
// each) and everything else in the process, as a real supervisor's would;
// "rss-before" is the resident memory it starts from. "heap-peak" is the
// most the Go heap held in objects while it ran (what a heap profile
// would show in use at that moment), sampled every millisecond: the part
// of the peak that is the program's own data.
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
			heap, err := heapPeak(f)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(vmHWM(b))/(1<<20), "peak-MiB")
			b.ReportMetric(float64(heap)/(1<<20), "heap-peak-MiB")
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
	b.Run(fmt.Sprintf("entries=%d/final-walk-and-sign", n), func(b *testing.B) {
		measure(b, func() error {
			st, err := cp.r.statement(nil, nil)
			if err != nil {
				return err
			}
			st.SessionID, st.Launch, st.Ended = attest.NewSessionID(), make([]byte, 32), time.Now().UTC()
			env, err := signBounded(cp.key, st, attest.MaxStatementSize)
			if err == nil && len(env) < n*100 {
				err = fmt.Errorf("a statement of %d bytes for %d entries", len(env), n)
			}
			return err
		})
	})
}

// heapPeak runs f and returns the most bytes the Go heap held in objects
// (live, or dead and not yet swept) while it ran, sampled every
// millisecond and once at the end.
func heapPeak(f func() error) (uint64, error) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	peak := read()
	done := make(chan struct{})
	sampled := make(chan uint64)
	go func() {
		most := uint64(0)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				sampled <- most
				return
			case <-tick.C:
				most = max(most, read())
			}
		}
	}()
	err := f()
	close(done)
	return max(peak, <-sampled, read()), err
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
