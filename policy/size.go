package policy

import (
	"fmt"
	"math"
)

// FormatSize is n bytes for a person: "8 MiB", "1.5 GiB", "512 B".
func FormatSize(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	f, i := float64(n), 0
	for math.Abs(f) >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if f == math.Trunc(f) {
		return fmt.Sprintf("%.0f %s", f, units[i])
	}
	return fmt.Sprintf("%.1f %s", f, units[i])
}
