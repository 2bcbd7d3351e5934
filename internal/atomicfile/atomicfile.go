// Package atomicfile writes files that a crash leaves whole or absent.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// Write writes data to a temporary file beside path, syncs it, renames it
// into place and syncs the directory, so that after a crash path holds
// either what it held before or all of data, never part of it. The file
// gets mode perm. The directory's sync is best effort: its failure is not
// reported (WriteFiles reports it).
func Write(path string, data []byte, perm os.FileMode) error {
	t, err := writeTemp(File{Path: path, Data: data, Perm: perm})
	if err == nil {
		err = t.rename()
	}
	if err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// File is one file for WriteFiles: where it goes, what it holds, its mode.
type File struct {
	Path string
	Data []byte
	Perm os.FileMode
}

// WriteFiles writes files with the guarantee Write gives each, but waits
// for the disk twice in all rather than twice per file: it writes every
// temporary file, syncs them all at once, renames them into place in the
// order given, then syncs each directory they are in once, all at once.
// A reader never sees a file before the ones given ahead of it; after a
// crash any of them may be missing, none is partly written. It returns one
// error per file, nil for each file that is in place and synced: a file
// whose temporary could not be written or synced is left out (the others
// are not), and a directory that cannot be synced fails its files.
func WriteFiles(files []File) []error {
	errs := make([]error, len(files))
	temps := make([]*temp, len(files))
	var wg sync.WaitGroup
	for i, f := range files {
		wg.Go(func() { temps[i], errs[i] = writeTemp(f) })
	}
	wg.Wait()
	dirs := map[string][]int{}
	for i, t := range temps {
		if errs[i] != nil {
			continue
		}
		if errs[i] = t.rename(); errs[i] == nil {
			d := filepath.Dir(files[i].Path)
			dirs[d] = append(dirs[d], i)
		}
	}
	for d, idx := range dirs {
		wg.Go(func() {
			if err := syncDir(d); err != nil {
				for _, i := range idx {
					errs[i] = fmt.Errorf("write %q: %w", files[i].Path, err)
				}
			}
		})
	}
	wg.Wait()
	return errs
}

// temp is a synced temporary file beside its target, not yet renamed.
type temp struct{ name, path string }

// writeTemp writes f's data to a temporary file beside f.Path with f's
// mode and syncs it; on failure nothing is left behind.
func writeTemp(f File) (*temp, error) {
	tf, err := os.CreateTemp(filepath.Dir(f.Path), "."+filepath.Base(f.Path)+".tmp-")
	if err != nil {
		return nil, err
	}
	_, err = tf.Write(f.Data)
	if err == nil {
		err = tf.Chmod(f.Perm)
	}
	if err == nil {
		err = tf.Sync()
	}
	if cerr := tf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tf.Name())
		return nil, fmt.Errorf("write %q: %w", f.Path, err)
	}
	return &temp{name: tf.Name(), path: f.Path}, nil
}

// rename moves t into place, removing it when that fails.
func (t *temp) rename() error {
	if err := os.Rename(t.name, t.path); err != nil {
		os.Remove(t.name)
		return fmt.Errorf("write %q: %w", t.path, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
