package linux

import "golang.org/x/sys/unix"

// ReadDirEach calls fn with the names in the directory open at fd, a
// getdents buffer at a time, without "." and "..", so a directory of any
// size costs one buffer of memory. It stops at fn's first error and
// returns it.
func ReadDirEach(fd int, fn func(name string) error) error {
	buf := make([]byte, 32<<10)
	var names []string
	for {
		var n int
		err := ignoringEINTR(func() (err error) {
			n, err = unix.Getdents(fd, buf)
			return err
		})
		if err != nil {
			return pathErr("getdents", procFD(fd), err)
		}
		if n <= 0 {
			return nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names[:0])
		for _, name := range names {
			if err := fn(name); err != nil {
				return err
			}
		}
	}
}
