package overlay

import (
	"errors"
	"path"
	"strings"
	"testing"

	"github.com/layerseal/layerseal/attest"
)

// fuzzPaths are the names generated layers are made of: nested, so
// whiteouts and opaque directories meet lower subtrees.
var fuzzPaths = []string{"a", "b", "a/x", "a/y", "a/x/q", "b/z", "c", "new\nl", "bad\xff"}

// fuzzLayers turns data into an upper and a lower fixture layer: each
// three bytes add one path (layer, path, kind) with data-derived details.
func fuzzLayers(data []byte) (upper, lower fx) {
	upper, lower = fx{}, fx{}
	for i := 0; i+2 < len(data); i += 3 {
		layer := lower
		if data[i]&1 == 1 {
			layer = upper
		}
		p := fuzzPaths[int(data[i+1])%len(fuzzPaths)]
		v := data[i+2]
		var s *spec
		switch v % 9 {
		case 0:
			s = file(strings.Repeat("d", int(v>>4)))
		case 1:
			s = dir()
		case 2:
			s = symlink("t" + string(rune('a'+v>>5)))
		case 3:
			s = whiteout()
		case 4:
			s = opaque()
		case 5:
			s = fifo()
		case 6:
			s = file("same").mode(0o600)
		case 7:
			s = dir().x("user.x", string(rune('0'+v>>6)))
		case 8:
			s = file("m").mtime(fxMtime + int64(v))
		}
		if v&0x80 != 0 && s.st.Mode&0o170000 != 0o120000 {
			s.owner(1000, 1000)
		}
		if !fuzzFits(layer, p, s) {
			continue
		}
		layer[p] = s
	}
	return upper, lower
}

// fuzzFits reports whether p can hold s in layer: its ancestors are (or
// will be made) directories and, unless s is one, it has no children.
func fuzzFits(layer fx, p string, s *spec) bool {
	for d := path.Dir(p); d != "."; d = path.Dir(d) {
		if a := layer[d]; a != nil && !a.isDir() {
			return false
		}
	}
	if !s.isDir() {
		for q := range layer {
			if strings.HasPrefix(q, p+"/") {
				return false
			}
		}
	}
	return true
}

// FuzzReadLayers reads generated upper layers against generated lower
// layers: Read must not panic, and either refuse the upper layer as
// foreign or return a change list of valid entries, sorted and unique,
// that hashes into a Merkle root, and whose paths exist in one layer.
func FuzzReadLayers(f *testing.F) {
	f.Add([]byte{0, 0, 1, 1, 0, 1, 1, 2, 0, 0, 2, 1, 1, 2, 3})
	f.Add([]byte{0, 0, 1, 0, 2, 0, 0, 3, 0, 1, 0, 4, 1, 3, 1})
	f.Add([]byte{1, 6, 0, 0, 6, 6, 1, 8, 3, 0, 8, 0, 1, 5, 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 300 {
			return
		}
		upper, lower := fuzzLayers(data)
		ch, err := readFx(t, upper, lower, ReadOptions{})
		if err != nil {
			if !errors.Is(err, ErrForeignUpper) {
				t.Fatalf("error other than ErrForeignUpper: %v", err)
			}
			return
		}
		for i := range ch.Entries {
			e := &ch.Entries[i]
			if err := e.Valid(); err != nil {
				t.Fatalf("invalid entry %q: %v", string(e.Path), err)
			}
			if p := string(e.Path); e.Path != attest.Root && !fuzzHas(upper, p) && !fuzzHas(lower, p) {
				t.Fatalf("entry %q is in neither layer", p)
			}
		}
		if _, err := attest.MerkleRoot(ch.Entries); err != nil {
			t.Fatalf("change list does not hash: %v", err)
		}
	})
}

// fuzzHas reports whether layer holds p, itself or as the implicit parent
// of a path beneath it.
func fuzzHas(layer fx, p string) bool {
	if layer[p] != nil {
		return true
	}
	for q := range layer {
		if strings.HasPrefix(q, p+"/") {
			return true
		}
	}
	return false
}
