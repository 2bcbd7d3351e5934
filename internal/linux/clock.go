package linux

import (
	"time"

	"golang.org/x/sys/unix"
)

// CoarseNow reads CLOCK_REALTIME_COARSE, the clock the kernel stamps file
// times with (before multigrain timestamps). Comparing a ctime with it,
// rather than with the precise clock, stays right when the coarse clock
// lags behind, as it does when timer ticks arrive late on a busy or
// emulated machine.
func CoarseNow() time.Time {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &ts); err != nil {
		return time.Now()
	}
	return time.Unix(ts.Sec, ts.Nsec)
}
