package attest

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"reflect"
	"testing"
)

func TestMarshalLeafLayout(t *testing.T) {
	e := Entry{
		Path:   "a\nb",
		Change: Modified,
		Old:    &State{Type: Symlink, Mode: 0o777, UID: 1, GID: 2, Size: 3, MtimeNS: -1, Target: "x/y"},
		New: &State{Type: File, Mode: 0o4755, UID: 0xFFFFFFFF, Size: 1 << 40, MtimeNS: 1, SHA256: digest("d"),
			Xattrs: []Xattr{{Name: "user.a", Value: []byte{0}}, {Name: "user.b"}}, Link: "c"},
	}
	var w bytes.Buffer
	str := func(s string) {
		binary.Write(&w, binary.BigEndian, uint32(len(s)))
		w.WriteString(s)
	}
	u32 := func(v uint32) { binary.Write(&w, binary.BigEndian, v) }
	u64 := func(v uint64) { binary.Write(&w, binary.BigEndian, v) }
	w.WriteString("layerseal/leaf/v1\x00")
	str("a\nb")
	str("modified")
	w.WriteByte(3)
	// old
	str("symlink")
	u32(0o777)
	u32(1)
	u32(2)
	u64(3)
	u64(0xFFFFFFFFFFFFFFFF)
	w.WriteByte(0)
	str("x/y")
	u64(0)
	u32(0)
	str("")
	// new
	str("file")
	u32(0o4755)
	u32(0xFFFFFFFF)
	u32(0)
	u64(1 << 40)
	u64(1)
	w.WriteByte(1)
	w.Write(digest("d"))
	str("")
	u64(0)
	u32(2)
	str("user.a")
	str("\x00")
	str("user.b")
	str("")
	str("c")

	got := e.MarshalLeaf()
	if !bytes.Equal(got, w.Bytes()) {
		t.Fatalf("MarshalLeaf =\n%x\nwant\n%x", got, w.Bytes())
	}
	want := sha256.Sum256(append([]byte{0}, w.Bytes()...))
	if !bytes.Equal(e.LeafHash(), want[:]) {
		t.Errorf("LeafHash = %x, want %x", e.LeafHash(), want)
	}

	added := Entry{Path: "n", Change: Added, New: &State{Type: Dir}}
	if p := added.MarshalLeaf()[len(LeafTag)+4+1+4+5]; p != 2 {
		t.Errorf("presence of added entry = %d, want 2", p)
	}
}

func TestLeafRoundTrip(t *testing.T) {
	for _, e := range sampleEntries() {
		leaf := e.MarshalLeaf()
		got, err := ParseLeaf(leaf)
		if err != nil {
			t.Fatalf("ParseLeaf(%q): %v", string(e.Path), err)
		}
		if !reflect.DeepEqual(*got, e) {
			t.Errorf("ParseLeaf round trip of %q:\n got %+v\nwant %+v", string(e.Path), *got, e)
		}
		for n := range len(leaf) {
			if _, err := ParseLeaf(leaf[:n]); err == nil {
				t.Fatalf("ParseLeaf accepted %d of %d bytes of %q", n, len(leaf), string(e.Path))
			}
		}
		if _, err := ParseLeaf(append(leaf, 0)); err == nil {
			t.Errorf("ParseLeaf accepted a trailing byte")
		}
	}
}

// TestLeafDistinct checks that changing any one field changes the leaf.
func TestLeafDistinct(t *testing.T) {
	base := sampleEntries()[3] // added file with xattrs and link
	variants := []func(e *Entry){
		func(e *Entry) { e.Path += "x" },
		func(e *Entry) { e.Change = Modified; e.Old = &State{Type: File} },
		func(e *Entry) { e.New.Type = Socket },
		func(e *Entry) { e.New.Mode ^= 1 },
		func(e *Entry) { e.New.UID++ },
		func(e *Entry) { e.New.GID++ },
		func(e *Entry) { e.New.Size++ },
		func(e *Entry) { e.New.MtimeNS-- },
		func(e *Entry) { e.New.SHA256 = nil },
		func(e *Entry) { e.New.SHA256 = digest("other") },
		func(e *Entry) { e.New.Target = "t" },
		func(e *Entry) { e.New.Rdev = 1 },
		func(e *Entry) { e.New.Xattrs = e.New.Xattrs[:2] },
		func(e *Entry) { e.New.Xattrs[0].Value = []byte{9} },
		func(e *Entry) { e.New.Xattrs[1].Name = "user.f" },
		func(e *Entry) { e.New.Link = "" },
		// Moving bytes between adjacent fields must change the leaf too.
		func(e *Entry) { e.New.Xattrs[0].Name, e.New.Xattrs[0].Value = "user.a\x00", []byte{1, 2} },
	}
	seen := map[string]int{string(base.MarshalLeaf()): -1}
	for i, v := range variants {
		e := cloneEntry(base)
		v(&e)
		leaf := string(e.MarshalLeaf())
		if j, ok := seen[leaf]; ok {
			t.Errorf("variant %d has the same leaf as %d", i, j)
		}
		seen[leaf] = i
	}
}

func cloneState(s *State) *State {
	if s == nil {
		return nil
	}
	c := *s
	c.SHA256 = bytes.Clone(s.SHA256)
	c.Xattrs = nil
	for _, x := range s.Xattrs {
		c.Xattrs = append(c.Xattrs, Xattr{Name: x.Name, Value: bytes.Clone(x.Value)})
	}
	return &c
}

func cloneEntry(e Entry) Entry {
	e.Old, e.New = cloneState(e.Old), cloneState(e.New)
	return e
}
