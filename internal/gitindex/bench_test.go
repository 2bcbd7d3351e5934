package gitindex

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// BenchmarkParse reads an index of 200,000 entries that git wrote, in
// version 2 and in version 4.
func BenchmarkParse(b *testing.B) {
	dir, git := repo(b)
	blob := git("hash-object", "-w", "b.txt")
	var in strings.Builder
	for i := range 200000 {
		fmt.Fprintf(&in, "100644 %s\tsrc/pkg%03d/dir%02d/file%05d.go\n", blob, i%1000, i%17, i)
	}
	for _, v := range []string{"2", "4"} {
		cmd := exec.Command("git", "update-index", "--index-info")
		cmd.Dir, cmd.Stdin = dir, strings.NewReader(in.String())
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("git update-index --index-info: %v\n%s", err, out)
		}
		git("update-index", "--index-version", v)
		data, err := os.ReadFile(filepath.Join(dir, ".git/index"))
		if err != nil {
			b.Fatal(err)
		}
		b.Run("v"+v, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				ix, err := Parse(data)
				if err != nil || len(ix.Entries) < 200000 {
					b.Fatalf("Parse: %v", err)
				}
			}
		})
	}
}
