package review

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/posixacl"
)

func st(mode uint32, xs ...attest.Xattr) *attest.State {
	return &attest.State{Type: attest.File, Mode: mode, MtimeNS: 1e18, Xattrs: xs}
}

func acl(es ...posixacl.Entry) []byte { return posixacl.Encode(es) }

var (
	userObj  = func(p uint16) posixacl.Entry { return posixacl.Entry{Tag: posixacl.TagUserObj, Perm: p} }
	groupObj = func(p uint16) posixacl.Entry { return posixacl.Entry{Tag: posixacl.TagGroupObj, Perm: p} }
	other    = func(p uint16) posixacl.Entry { return posixacl.Entry{Tag: posixacl.TagOther, Perm: p} }
	mask     = func(p uint16) posixacl.Entry { return posixacl.Entry{Tag: posixacl.TagMask, Perm: p} }
	user     = func(id uint32, p uint16) posixacl.Entry {
		return posixacl.Entry{Tag: posixacl.TagUser, ID: id, Perm: p}
	}
	group = func(id uint32, p uint16) posixacl.Entry {
		return posixacl.Entry{Tag: posixacl.TagGroup, ID: id, Perm: p}
	}
)

const rw, r, rwx, rx = posixacl.Read | posixacl.Write, posixacl.Read, posixacl.Read | posixacl.Write | posixacl.Execute, posixacl.Read | posixacl.Execute

// TestMetadata: each kind of metadata change is said with its old and
// new value (mode with its special bits, owner, ACL entries decoded,
// other xattrs by name with bounded, escaped values), the mtime only
// when nothing else changed, and nothing for additions and deletions.
func TestMetadata(t *testing.T) {
	later := func(s *attest.State) *attest.State { s.MtimeNS += 5e9; return s }
	withUID := func(s *attest.State, uid, gid uint32) *attest.State { s.UID, s.GID = uid, gid; return s }
	accessX := func(b []byte) attest.Xattr { return attest.Xattr{Name: posixacl.AccessXattr, Value: b} }
	defaultX := func(b []byte) attest.Xattr { return attest.Xattr{Name: posixacl.DefaultXattr, Value: b} }
	dir := func(s *attest.State) *attest.State { s.Type = attest.Dir; return s }
	for _, c := range []struct {
		name   string
		change attest.Change
		old    *attest.State
		new    *attest.State
		want   string // Meta.String; "" for nil
	}{
		{"chmod +x", attest.Metadata, st(0o644), later(st(0o755)), "mode 0644 -> 0755"},
		{"chmod 0600, content changed", attest.Modified, st(0o644), later(st(0o600)), "mode 0644 -> 0600"},
		{"setuid", attest.Metadata, st(0o755), st(0o4755), "mode 0755 -> 4755 (+setuid)"},
		{"setgid and sticky lost", attest.Metadata, dir(st(0o3775)), dir(st(0o775)), "mode 3775 -> 0775 (-setgid, -sticky)"},
		{"chown", attest.Metadata, st(0o644), withUID(later(st(0o644)), 65534, 50), "uid 0 -> 65534; gid 0 -> 50"},
		{"setfacl -m u:1000:rwx under a mask r--", attest.Metadata, st(0o644),
			st(0o644, accessX(acl(userObj(rw), user(1000, rwx), groupObj(r), mask(r), other(r)))),
			"acl +user:1000:rwx (effective r--), +mask::r--"},
		{"setfacl -m u:1000:rwx, mask rwx", attest.Metadata, st(0o644),
			st(0o674, accessX(acl(userObj(rw), user(1000, rwx), groupObj(r), mask(rwx), other(r)))),
			"mode 0644 -> 0674; acl +user:1000:rwx, +mask::rwx"},
		{"setfacl -x g:50", attest.Metadata,
			st(0o664, accessX(acl(userObj(rw), groupObj(r), group(50, r), group(60, rw), mask(rw), other(r)))),
			st(0o664, accessX(acl(userObj(rw), groupObj(r), group(60, rw), mask(rw), other(r)))),
			"acl -group:50:r--"},
		{"a user's permissions changed", attest.Metadata,
			st(0o664, accessX(acl(userObj(rw), user(1000, r), groupObj(r), mask(rw), other(r)))),
			st(0o664, accessX(acl(userObj(rw), user(1000, rw), groupObj(r), mask(rw), other(r)))),
			"acl -user:1000:r--, +user:1000:rw-"},
		{"setfacl -b", attest.Metadata,
			st(0o664, accessX(acl(userObj(rw), user(1000, rw), groupObj(r), mask(rw), other(r)))),
			st(0o644),
			"mode 0664 -> 0644; acl -user:1000:rw-, -mask::rw-"},
		{"default ACL on a directory", attest.Metadata, dir(st(0o755)),
			dir(st(0o755, defaultX(acl(userObj(rwx), user(1000, rwx), groupObj(rx), mask(rwx), other(rx))))),
			"acl +default:user::rwx, +default:user:1000:rwx, +default:group::r-x, +default:mask::rwx, +default:other::r-x"},
		{"malformed ACL value named as an xattr", attest.Metadata, st(0o644),
			st(0o644, accessX([]byte{1, 0, 0, 0})),
			`xattr +system.posix_acl_access="\x01\x00\x00\x00"`},
		{"xattrs added, removed, changed", attest.Metadata,
			st(0o644, attest.Xattr{Name: "user.gone", Value: []byte("old")}, attest.Xattr{Name: "user.v", Value: []byte("a")}),
			st(0o644, attest.Xattr{Name: "user.note", Value: []byte("x")}, attest.Xattr{Name: "user.v", Value: []byte("b")}),
			`xattr -user.gone="old", +user.note="x", user.v="a" -> "b"`},
		{"hostile xattr name and value", attest.Metadata, st(0o644),
			st(0o644, attest.Xattr{Name: "user.\x1b]0;x\x07\n", Value: []byte("\x1b[2J\u202e\xff")}),
			`xattr +user.%1B]0;x%07%0A="\x1b[2J\u202e\xff"`},
		{"long xattr value by size", attest.Metadata, st(0o644),
			st(0o644, attest.Xattr{Name: "user.big", Value: []byte(strings.Repeat("a", XattrShown+1))}),
			`xattr +user.big=(65 bytes)`},
		{"security.capability by name", attest.Metadata, st(0o755),
			st(0o755, attest.Xattr{Name: "security.capability", Value: []byte{1, 0, 0, 2}}),
			`xattr +security.capability="\x01\x00\x00\x02"`},
		{"touch -d", attest.Metadata, st(0o644), later(st(0o644)),
			"mtime 2001-09-09T01:46:40Z -> 2001-09-09T01:46:45Z"},
		{"mtime of a modified file", attest.Modified, st(0o644), later(st(0o644)), ""},
		{"mtime not said beside a mode change", attest.Metadata, st(0o644), later(st(0o600)), "mode 0644 -> 0600"},
		{"nothing differs", attest.Metadata, st(0o644), st(0o644), ""},
		{"a file made a symlink: its mode is unused", attest.TypeChange, st(0o644), func() *attest.State { s := st(0o777); s.Type = attest.Symlink; return s }(), ""},
		{"a file made a symlink of another owner", attest.TypeChange, st(0o644), func() *attest.State { s := st(0o777); s.Type, s.UID = attest.Symlink, 7; return s }(), "uid 0 -> 7"},
		{"added", attest.Added, nil, st(0o4755), ""},
		{"deleted", attest.Deleted, st(0o4755), nil, ""},
	} {
		m := Metadata(attest.Entry{Path: "f", Change: c.change, Old: c.old, New: c.new})
		if got := m.String(); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
		if (m == nil) != (c.want == "") {
			t.Errorf("%s: Meta %v for text %q", c.name, m, c.want)
		}
		if s := m.String(); strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r >= 0x7f }) {
			t.Errorf("%s: text holds a byte a terminal could act on: %q", c.name, s)
		}
	}
}

// TestMetadataTyped: the typed fields carry what the text says.
func TestMetadataTyped(t *testing.T) {
	m := Metadata(attest.Entry{Path: "f", Change: attest.Metadata, Old: st(0o644, attest.Xattr{Name: "user.v", Value: []byte("a")}),
		New: st(0o674, attest.Xattr{Name: posixacl.AccessXattr, Value: acl(userObj(rw), user(1000, rwx), groupObj(r), mask(r), other(r))},
			attest.Xattr{Name: "user.v", Value: []byte(strings.Repeat("b", 100))})})
	if m.Mode == nil || m.Mode.Old != 0o644 || m.Mode.New != 0o674 || m.UID != nil || m.Mtime != nil {
		t.Errorf("mode %+v, uid %+v, mtime %+v", m.Mode, m.UID, m.Mtime)
	}
	if len(m.ACL) != 2 {
		t.Fatalf("ACL changes %+v", m.ACL)
	}
	if a := m.ACL[0]; a.Change != attest.Added || a.Default || a.Tag != "user" || a.ID == nil || *a.ID != 1000 || a.Perms != "rwx" || a.Effective != "r--" || a.Entry != "user:1000:rwx" {
		t.Errorf("ACL change %+v", a)
	}
	if a := m.ACL[1]; a.Tag != "mask" || a.ID != nil || a.Effective != "" {
		t.Errorf("ACL change %+v", a)
	}
	if len(m.Xattrs) != 1 {
		t.Fatalf("xattr changes %+v", m.Xattrs)
	}
	if x := m.Xattrs[0]; x.Name != "user.v" || x.Change != attest.Modified || x.OldSize != 1 || string(x.OldValue) != "a" || x.NewSize != 100 || x.NewValue != nil {
		t.Errorf("xattr change %+v", x)
	}
}

// TestPatchMetadataNote: a pair with metadata gets one comment line
// before its blocks, a directory whose only change is its mtime gets
// none, and `git apply` takes a patch holding such lines (a mode change
// git knows, a content change, a note alone) and applies its blocks.
func TestPatchMetadataNote(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is needed for this test: %v", err)
	}
	if PatchMetadata(attest.Entry{Path: "d", Change: attest.Metadata, Old: st(0o755), New: func() *attest.State { s := st(0o755); s.Type, s.MtimeNS = attest.Dir, 7; return s }()}) != nil {
		t.Error("a directory's mtime has a note in the patch")
	}
	if PatchMetadata(attest.Entry{Path: "f", Change: attest.Metadata, Old: st(0o644), New: func() *attest.State { s := st(0o644); s.MtimeNS = 7; return s }()}) == nil {
		t.Error("a file's mtime has no note in the patch")
	}
	repo := t.TempDir()
	writeTree(t, repo, map[string]*file{"run.sh": {data: "#!/bin/sh\n"}, "a.txt": {data: lines(10, nil)}, "secret": {data: "s\n"}})
	git(t, repo, "init", "-q")
	git(t, repo, "add", "-A")
	git(t, repo, "commit", "-qm", "base")
	var patch strings.Builder
	for _, c := range []struct {
		path     attest.Path
		old, new Side
		e        attest.Entry
	}{
		{"a.txt", (&file{data: lines(10, nil)}).side(), (&file{data: lines(10, map[int]string{9: "nine\n"})}).side(),
			attest.Entry{Change: attest.Modified, Old: st(0o644), New: func() *attest.State { s := st(0o644); s.UID = 1000; return s }()}},
		{"run.sh", (&file{data: "#!/bin/sh\n"}).side(), (&file{data: "#!/bin/sh\n", exec: true}).side(),
			attest.Entry{Change: attest.Metadata, Old: st(0o644), New: st(0o755)}},
		{"secret", (&file{data: "s\n"}).side(), (&file{data: "s\n"}).side(),
			attest.Entry{Change: attest.Metadata, Old: st(0o644), New: st(0o600, attest.Xattr{Name: "user.note", Value: []byte("x")})}},
	} {
		c.e.Path = c.path
		d, err := Compare(FilePair{Path: c.path, Old: c.old, New: c.new, Meta: PatchMetadata(c.e)})
		if err != nil {
			t.Fatal(err)
		}
		if d.Empty() {
			t.Fatalf("%s: empty", c.path)
		}
		if c.path == "secret" && d.InGit() {
			t.Errorf("%s: git shows no change of a mode it does not keep", c.path)
		}
		d.WritePatch(&patch)
	}
	p := patch.String()
	for _, want := range []string{
		"# metadata of a.txt: uid 0 -> 1000\ndiff --git a/a.txt b/a.txt\n",
		"# metadata of run.sh: mode 0644 -> 0755\ndiff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 100755\n",
		"+nine\n line 10\n# metadata of run.sh",
		"# metadata of secret: mode 0644 -> 0600; xattr +user.note=\"x\"\n",
	} {
		if !strings.Contains(p, want) {
			t.Errorf("patch lacks %q:\n%s", want, p)
		}
	}
	pf := filepath.Join(t.TempDir(), "p.patch")
	if err := os.WriteFile(pf, []byte(p), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, repo, "apply", "--check", pf)
	git(t, repo, "apply", pf)
	if st := git(t, repo, "status", "--porcelain"); st != " M a.txt\n M run.sh\n" {
		t.Errorf("after git apply, git status:\n%s", st)
	}
	if fi, err := os.Stat(filepath.Join(repo, "run.sh")); err != nil || fi.Mode()&0o100 == 0 {
		t.Errorf("git apply did not make run.sh executable: %v %v", fi.Mode(), err)
	}
}
