package linux

import (
	"math"
	"math/big"
	"testing"
)

// TestNanosFit checks nanosFit against exact arithmetic at and around
// both ends of int64 nanoseconds.
func TestNanosFit(t *testing.T) {
	exact := func(sec, nsec int64) bool {
		n := new(big.Int).Mul(big.NewInt(sec), big.NewInt(1e9))
		n.Add(n, big.NewInt(nsec))
		return n.IsInt64()
	}
	const g, m = math.MaxInt64 / 1_000_000_000, math.MinInt64 / 1_000_000_000
	for _, sec := range []int64{0, -1, 1, g, g + 1, g - 1,
		m, m - 1, m - 2, m + 1, 13569465600, math.MaxInt64, math.MinInt64} {
		for _, nsec := range []int64{0, 1, 145224191, 145224192, 145224193, 854775807, 854775808, 999999999} {
			if got, want := nanosFit(sec, nsec), exact(sec, nsec); got != want {
				t.Errorf("nanosFit(%d, %d) = %v, want %v", sec, nsec, got, want)
			}
		}
	}
}
