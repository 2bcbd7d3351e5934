package overlay

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkApply applies a change set of 5,000 new files of 10 KiB, 1,000
// per directory, into an empty workspace (bench/apply compares a larger one
// with cp -a).
func BenchmarkApply(b *testing.B) {
	const files, size = 5000, 10 << 10
	upper := b.TempDir()
	data := make([]byte, size)
	for i := range files {
		dir := filepath.Join(upper, "tree", fmt.Sprint(i/1000))
		if i%1000 == 0 {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		data[0] = byte(i)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprint(i)), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	empty := b.TempDir()
	entries := applyTestEntries(b, empty, upper)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		ws := b.TempDir()
		b.StartTimer()
		if err := Apply(upper, ws, entries, ApplyOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/files, "ns/file")
}
