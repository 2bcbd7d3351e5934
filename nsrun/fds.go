package nsrun

import (
	"fmt"
	"os"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/internal/linux"
)

// Descriptors cross from the supervisor to the agent like this: the
// supervisor hands init its socket at 3 and copies of the caller's
// descriptors 3 .. 3+n-1 at 4 .. 4+n-1; init marks every descriptor from 3
// on close-on-exec at once, so whatever else the caller left open (a shell's
// `exec 9<dir`) stops there; init hands the agent stage its spec pipe at 3,
// its report pipe at 4 and the preserved descriptors at 5 .. 5+n-1; the
// stage moves them to 3 .. 3+n-1 and its pipes above them, and marks all
// but the preserved ones close-on-exec before it executes the agent.

// preservedFiles duplicates the caller's descriptors 3 .. 3+n-1 for init.
// Each must be open and inherited (not close-on-exec): every descriptor the
// Go runtime or this process opens is close-on-exec, so one that is could be
// the signing key landing on a free number, never one the caller meant. The
// copies are close-on-exec in the caller; close them once init runs.
func preservedFiles(n int) ([]*os.File, error) {
	var files []*os.File
	for fd := 3; fd < 3+n; fd++ {
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err == nil && flags&unix.FD_CLOEXEC != 0 {
			closeFiles(files)
			return nil, fmt.Errorf("descriptor %d was not passed to layerseal, but %d descriptors (3 to %d) were asked to be passed on to the agent: open them before starting layerseal (as a shell's exec 3<FILE does), or ask for fewer",
				fd, n, 2+n)
		}
		nfd, err := linux.DupFrom(fd, 3, true)
		if err != nil {
			closeFiles(files)
			return nil, fmt.Errorf("descriptor %d is not open (%w), but %d descriptors (3 to %d) were asked to be passed on to the agent: open them before starting layerseal (as a shell's exec 3<FILE does), or ask for fewer",
				fd, err, n, 2+n)
		}
		files = append(files, os.NewFile(uintptr(nfd), fmt.Sprintf("preserved-%d", fd)))
	}
	return files, nil
}

func closeFiles(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// arrangeFDs is the agent stage's last word on descriptors: the preserved
// ones (at 5 .. 5+n-1) move to 3 .. 3+n-1, the stage's own descriptors
// (own: its spec and report pipes, at 3 and 4) move above them, and every
// descriptor from 3+n on becomes close-on-exec. It returns the own
// descriptors' numbers, moved or not. Nothing else may open a descriptor
// before this call.
func arrangeFDs(n int, own ...int) ([]int, error) {
	moved := slices.Clone(own)
	if n > 0 {
		for i, fd := range own {
			nfd, err := linux.DupFrom(fd, 5+n, true)
			if err != nil {
				return moved, err
			}
			unix.Close(fd)
			moved[i] = nfd
		}
		for i := 0; i < n; i++ {
			if err := linux.Dup3(5+i, 3+i, false); err != nil {
				return moved, err
			}
		}
	}
	return moved, linux.CloexecFrom(3 + n)
}
