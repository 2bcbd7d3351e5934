package layerseal

import (
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/statxfloor"
	"github.com/layerseal/layerseal/probe"
)

// benchUpper makes an upper layer of n entries as an agent would leave it
// (files of 1 KiB, 100 per directory, all added) over an empty workspace,
// and a checkpointer over it that has taken its first checkpoint.
func benchUpper(b *testing.B, n int) (*checkpointer, []string) {
	b.Helper()
	root := b.TempDir()
	upper, lower, work, out := filepath.Join(root, "upper"), filepath.Join(root, "lower"), filepath.Join(root, "work"), filepath.Join(root, "out")
	for _, d := range []string{upper, lower, work, out} {
		if err := os.Mkdir(d, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	content := make([]byte, 1024)
	var files []string
	for i := 0; len(files)+1+(i+99)/100 < n; i++ {
		dir := filepath.Join(upper, fmt.Sprintf("d%04d", i/100))
		if i%100 == 0 {
			if err := os.Mkdir(dir, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		content[0], content[1] = byte(i), byte(i>>8)
		p := filepath.Join(dir, fmt.Sprintf("f%03d", i%100))
		if err := os.WriteFile(p, content, 0o644); err != nil {
			b.Fatal(err)
		}
		files = append(files, p)
	}
	_, priv, _ := ed25519.GenerateKey(nil)
	key, _ := attest.NewSigner(priv)
	dir, err := makeCheckpointDir(out)
	if err != nil {
		b.Fatal(err)
	}
	r, err := newReader(upper, work, lower, nil, fillPolicy(attest.Policy{}), false)
	if err != nil {
		b.Fatal(err)
	}
	cp := &checkpointer{r: r, key: key, dir: dir, changes: filepath.Join(root, checkpointChangesFile)}
	cp.base.SessionID, cp.base.Launch, cp.base.Workspace = attest.NewSessionID(), sha([]byte("launch")), attest.Bytes(lower)
	time.Sleep(2 * probe.RacyWindow())
	// Every upper entry is a change: the files, their dirs, the root.
	if res, err := cp.take(); err != nil || res.Unchanged || res.Count != uint64(cp.probe.Len()) || cp.probe.Len() != n {
		b.Fatalf("first checkpoint: %+v, %v (want %d changes)", res, err, n)
	}
	return cp, files
}

// BenchmarkCheckpoint measures, side by side over one upper layer of 10,000
// and of 100,000 entries: an idle checkpoint (probe only), a checkpoint
// after 1% of the files changed, hashing that 1% alone, a full content
// walk of the upper layer (the final walk with nothing reused), and the
// floor of any probe that stats every entry: one bare statx per entry,
// on as many locked threads as the probe uses.
// It reports the memory the supervisor holds between checkpoints per
// upper entry. bench/checkpoint prints the comparison table.
func BenchmarkCheckpoint(b *testing.B) {
	sizes := []int{10_000, 100_000}
	if testing.Short() {
		sizes = []int{1_000} // scripts/bench-smoke: only that it runs
	}
	for _, n := range sizes {
		cp, files := benchUpper(b, n)
		b.Run(fmt.Sprintf("entries=%d/idle", n), func(b *testing.B) {
			time.Sleep(2 * probe.RacyWindow())
			for b.Loop() {
				res, err := cp.take()
				if err != nil || !res.Unchanged {
					b.Fatalf("%+v %v", res, err)
				}
			}
		})
		changed := files[:n/100]
		round := 0
		rewrite := func() {
			round++
			buf := make([]byte, 1024)
			for i, p := range changed {
				buf[0], buf[1], buf[2] = byte(i), byte(i>>8), byte(round)
				if err := os.WriteFile(p, buf, 0o644); err != nil {
					b.Fatal(err)
				}
			}
			time.Sleep(2 * probe.RacyWindow())
		}
		b.Run(fmt.Sprintf("entries=%d/changed-1pct", n), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				rewrite()
				b.StartTimer()
				res, err := cp.take()
				if err != nil || res.Unchanged || res.Hashed != uint64(len(changed))*1024 {
					b.Fatalf("%+v %v", res, err)
				}
			}
		})
		b.Run(fmt.Sprintf("entries=%d/hash-1pct", n), func(b *testing.B) {
			for b.Loop() {
				for _, p := range changed {
					f, err := os.Open(p)
					if err != nil {
						b.Fatal(err)
					}
					h := sha256.New()
					io.Copy(h, f)
					f.Close()
				}
			}
		})
		b.Run(fmt.Sprintf("entries=%d/full-walk", n), func(b *testing.B) {
			for b.Loop() {
				st, err := cp.r.statement(nil, nil)
				if err != nil || len(st.Entries) != n || st.Stats.BytesHashed != uint64(len(files))*1024 {
					b.Fatalf("%d entries, %d bytes hashed, %v", len(st.Entries), st.Stats.BytesHashed, err)
				}
			}
		})
		b.Run(fmt.Sprintf("entries=%d/statx-floor", n), func(b *testing.B) {
			tree, err := statxfloor.Open(cp.r.upper)
			if err != nil || tree.Len() != n-1 {
				b.Fatalf("%v entries below the root, want %d: %v", tree, n-1, err)
			}
			defer tree.Close()
			for b.Loop() {
				if err := tree.Stat(min(runtime.GOMAXPROCS(0), 8)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("entries=%d/memory", n), func(b *testing.B) {
			for b.Loop() {
				held := cp.probe.Bytes() + cp.digests.Bytes() + int(cp.log.Size())*32
				b.ReportMetric(float64(held)/float64(cp.probe.Len()), "held-B/entry")
			}
			// The same measured by the heap: what one more copy of the
			// probe index and digest cache, built as take builds them,
			// retains after a collection.
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			idx, err := probe.Scan(cp.r.upper, probe.ScanOptions{Dir: filepath.Dir(cp.changes)})
			if err != nil {
				b.Fatal(err)
			}
			defer idx.Close()
			// The change list walk returns is dropped: only the index and
			// the cache are held.
			_, cache, err := cp.walk(idx, cp.previous())
			if err != nil {
				b.Fatal(err)
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(idx.Len()), "heap-B/entry")
			runtime.KeepAlive(idx)
			runtime.KeepAlive(cache)
			cache.close()
		})
	}
}
