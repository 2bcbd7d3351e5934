package probe

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/internal/statxfloor"
)

// benchTree builds, under root, files/100 directories of 100 files of 1 KiB
// each, grouped ten to a directory at every level above them.
func benchTree(b *testing.B, root string, files int) {
	b.Helper()
	content := make([]byte, 1024)
	for leaf := range files / 100 {
		dir := root
		for n := leaf / 10; ; n /= 10 {
			dir = filepath.Join(dir, fmt.Sprintf("d%d", n%10))
			if n < 10 {
				break
			}
		}
		dir = filepath.Join(dir, fmt.Sprintf("leaf%d", leaf))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for i := range 100 {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d", i)), content, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkScan compares Scan on one worker, Scan as it runs by default,
// and the floor of any scan that stats every entry: one bare statx per
// entry, on as many locked OS threads as Scan uses workers, with the names
// known and the directories open.
func BenchmarkScan(b *testing.B) {
	workers := min(runtime.GOMAXPROCS(0), maxScanWorkers)
	for _, files := range []int{10_000, 100_000} {
		root := b.TempDir()
		benchTree(b, root, files)
		x, err := Scan(root, ScanOptions{})
		if err != nil {
			b.Fatal(err)
		}
		entries := x.Len()
		perEntry := func(b *testing.B, cpu0 int64) {
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(entries), "ns/entry")
			b.ReportMetric(float64(cpuNS(b)-cpu0)/float64(b.N)/float64(entries), "cpu-ns/entry")
		}
		for _, c := range []struct {
			name    string
			workers int
		}{{"sequential", 1}, {"parallel", workers}} {
			b.Run(fmt.Sprintf("entries=%dk/%s", files/1000, c.name), func(b *testing.B) {
				cpu0 := cpuNS(b)
				for b.Loop() {
					y, err := scanWith(root, ScanOptions{}, c.workers)
					if err != nil || y.Len() != entries || y.Digest() != x.Digest() {
						b.Fatalf("%d entries, want %d; digest equal %t; %v", y.Len(), entries, y.Digest() == x.Digest(), err)
					}
				}
				perEntry(b, cpu0)
			})
		}
		b.Run(fmt.Sprintf("entries=%dk/statx-floor", files/1000), func(b *testing.B) {
			tree, err := statxfloor.Open(root)
			if err != nil {
				b.Fatal(err)
			}
			defer tree.Close()
			if tree.Len() != entries-1 {
				b.Fatalf("%d entries below the root, the scan saw %d", tree.Len(), entries-1)
			}
			cpu0 := cpuNS(b)
			for b.Loop() {
				if err := tree.Stat(workers); err != nil {
					b.Fatal(err)
				}
			}
			perEntry(b, cpu0)
		})
	}
}

// cpuNS is the CPU time, user and system, the process has used.
func cpuNS(b *testing.B) int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
