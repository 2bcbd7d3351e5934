package policy

import "testing"

// TestFormatSize: sizes for a person, exact when whole.
func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 512: "512 B", 8 << 20: "8 MiB", 3 << 29: "1.5 GiB", 1<<40 + 1: "1.0 TiB"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
}
