package overlay

import (
	"errors"
	"fmt"
	"hash"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/internal/linux"
)

// applyBufSize is the largest copy buffer of applyCopy.
const applyBufSize = 1 << 20

// applySmall is the largest file applyCopy reads without asking for holes.
const applySmall = 64 << 10

// applyZeros feeds hashes the contents of holes.
var applyZeros = make([]byte, applyBufSize)

// applyCopy copies the first size bytes of the regular file src into dst
// (skipped when dst < 0) at the same offsets, writing only the data
// regions SEEK_DATA/SEEK_HOLE report, so holes stay holes, and sets dst's
// size to size. h, when not nil, receives all size bytes, holes as zeros.
// A src shorter or longer than size is ErrNotAttested. A file of at most
// applySmall bytes is read whole in one call (and written with its holes
// filled: at that size a hole saves at most a few blocks).
func applyCopy(dst, src int, size int64, h hash.Hash) error {
	if size <= applySmall {
		return applyCopySmall(dst, src, size, h)
	}
	// A buffer no larger than the file: zeroing a large one for each of
	// many small files would cost more than copying them.
	buf := make([]byte, max(1, min(applyBufSize, size)))
	for off := int64(0); off < size; {
		data, err := linux.Seek(src, off, unix.SEEK_DATA)
		switch {
		case errors.Is(err, unix.ENXIO):
			data = size
		case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP):
			data = off // no hole reporting: all data
		case err != nil:
			return err
		}
		data = min(data, size)
		applyHashZeros(h, data-off)
		if data >= size {
			break
		}
		hole, err := linux.Seek(src, data, unix.SEEK_HOLE)
		switch {
		case errors.Is(err, unix.ENXIO) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP):
			hole = size
		case err != nil:
			return err
		}
		hole = min(hole, size)
		for off = data; off < hole; {
			n, err := linux.Pread(src, buf[:min(int64(len(buf)), hole-off)], off)
			if err != nil {
				return err
			}
			if n == 0 {
				return applySizeError(off, size)
			}
			if h != nil {
				h.Write(buf[:n])
			}
			if dst >= 0 {
				if err := linux.PwriteAll(dst, buf[:n], off); err != nil {
					return err
				}
			}
			off += int64(n)
		}
	}
	// SEEK_DATA reports no data both in a hole at the end and past the
	// end: only the file's size tells a short file from a sparse one.
	st, err := linux.Lstat(src, "")
	if err != nil {
		return err
	}
	if int64(st.Size) != size {
		return applySizeError(int64(st.Size), size)
	}
	if dst >= 0 {
		return linux.Ftruncate(dst, size)
	}
	return nil
}

// applyCopySmall is applyCopy for a file of at most applySmall bytes: it
// asks for one byte more than size, so a longer file shows in the same
// reads, and writes dst (a new, empty file) in one call.
func applyCopySmall(dst, src int, size int64, h hash.Hash) error {
	buf := make([]byte, size+1)
	n := 0
	for n < len(buf) {
		k, err := linux.Pread(src, buf[n:], int64(n))
		if err != nil {
			return err
		}
		if k == 0 {
			break
		}
		n += k
	}
	if int64(n) != size {
		return applySizeError(int64(n), size)
	}
	data := buf[:size]
	if h != nil {
		h.Write(data)
	}
	if dst < 0 || size == 0 {
		return nil
	}
	return linux.PwriteAll(dst, data, 0)
}

// applySizeError says that a file of got bytes is not the size bytes the
// statement says.
func applySizeError(got, size int64) error {
	if got > size {
		return fmt.Errorf("%w: file is longer than the statement's %d bytes", ErrNotAttested, size)
	}
	return fmt.Errorf("%w: file ends at %d, statement says %d bytes", ErrNotAttested, got, size)
}

// applyHashZeros writes n zero bytes to h (if not nil).
func applyHashZeros(h hash.Hash, n int64) {
	if h == nil {
		return
	}
	for n > 0 {
		k := min(n, int64(len(applyZeros)))
		h.Write(applyZeros[:k])
		n -= k
	}
}
