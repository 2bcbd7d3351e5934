package probe

import (
	"errors"
	"fmt"
	"os"
	"sync"
)

// entryStore keeps the listings of a scan, appended by its workers: in a
// file of its own, or in memory. The index holds each listing's SHA-256
// and checks it on every read; the store itself vouches for nothing.
type entryStore struct {
	mu   sync.Mutex
	file *os.File // nil: in mem
	mem  []byte
	size int64
	err  error // the first write that failed: nothing is kept
}

// newEntryStore returns a store in a new file in dir, or in memory when
// dir is empty. A file that cannot be made leaves the store failed.
func newEntryStore(dir string) *entryStore {
	s := &entryStore{}
	if dir != "" {
		s.file, s.err = os.CreateTemp(dir, ".probe-*")
		if s.err != nil {
			s.err = fmt.Errorf("keep probe entries: %w", s.err)
		}
	}
	return s
}

// add appends b and returns its offset.
func (s *entryStore) add(b []byte) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	off := s.size
	s.size += int64(len(b))
	switch {
	case s.err != nil:
	case s.file == nil:
		s.mem = append(s.mem, b...)
	default:
		if _, err := s.file.WriteAt(b, off); err != nil {
			s.err = fmt.Errorf("keep probe entries: %w", err)
		}
	}
	return off
}

// read returns size bytes at off.
func (s *entryStore) read(off, size int64) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.err != nil:
		return nil, s.err
	case s.file == nil:
		if off+size > int64(len(s.mem)) {
			return nil, errors.New("past the end")
		}
		return s.mem[off : off+size : off+size], nil
	}
	b := make([]byte, size)
	if _, err := s.file.ReadAt(b, off); err != nil {
		return nil, err
	}
	return b, nil
}

// memBytes is the memory the store holds.
func (s *entryStore) memBytes() int { return cap(s.mem) }

// close removes the file; reads fail after it.
func (s *entryStore) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = errors.New("closed")
	}
	if s.file == nil {
		s.mem = nil
		return nil
	}
	f := s.file
	s.file = nil
	err := os.Remove(f.Name())
	f.Close()
	return err
}
