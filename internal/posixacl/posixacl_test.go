package posixacl

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseRoundTrip(t *testing.T) {
	a := ACL{{TagUserObj, Read | Write, 0}, {TagUser, Read | Write | Execute, 1000}, {TagGroupObj, Read, 0},
		{TagGroup, Write, 50}, {TagMask, Read | Execute, 0}, {TagOther, 0, 0}}
	got, err := Parse(Encode(a))
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != "user::rw-,user:1000:rwx,group::r--,group:50:-w-,mask::r-x,other::---" {
		t.Errorf("String: %s", got)
	}
	if !bytes.Equal(Encode(got), Encode(a)) {
		t.Error("Encode(Parse(b)) != b")
	}
	if e := got[1]; got.Effective(e) != Read|Execute {
		t.Errorf("user:1000 effective %s, want r-x (the mask)", Perms(got.Effective(e)))
	}
	if e := got[3]; got.Effective(e) != 0 {
		t.Errorf("group:50 effective %s, want --- (the mask)", Perms(got.Effective(e)))
	}
}

func TestParseRefuses(t *testing.T) {
	good := Encode(ACL{{TagUserObj, Read, 0}})
	bad := map[string][]byte{
		"empty":      nil,
		"short":      good[:6],
		"version 1":  append([]byte{1, 0, 0, 0}, good[4:]...),
		"tag 0x40":   append(append([]byte{}, good[:4]...), 0x40, 0, 4, 0, 0xff, 0xff, 0xff, 0xff),
		"perm 0x8":   append(append([]byte{}, good[:4]...), 1, 0, 8, 0, 0xff, 0xff, 0xff, 0xff),
		"over limit": append(append([]byte{}, good[:4]...), make([]byte, (maxEntries+1)*entrySize)...),
	}
	for name, b := range bad {
		if _, err := Parse(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err %v, want ErrMalformed", name, err)
		}
	}
}

// TestParseKernel reads what setfacl made the kernel store.
func TestParseKernel(t *testing.T) {
	if _, err := exec.LookPath("setfacl"); err != nil {
		t.Fatal("setfacl is needed (Debian's acl package; scripts/setup test installs it)")
	}
	f := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(f, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("setfacl", "-m", "u:1000:rwx,g:50:r", f).CombinedOutput(); err != nil {
		t.Fatalf("setfacl: %v: %s", err, out)
	}
	buf := make([]byte, 1024)
	n, err := unix.Lgetxattr(f, AccessXattr, buf)
	if err != nil {
		t.Fatal(err)
	}
	a, err := Parse(buf[:n])
	if err != nil {
		t.Fatal(err)
	}
	if want := "user::rw-,user:1000:rwx,group::r--,group:50:r--,mask::rwx,other::---"; a.String() != want {
		t.Errorf("got %s, want %s", a, want)
	}
}
