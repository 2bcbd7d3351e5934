package overlay

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/probe"
)

// origin is the xattr overlay leaves on copied-up entries.
const origin = "trusted.overlay.origin"

func TestClassifyRules(t *testing.T) {
	base := func() fx {
		return fx{
			"a":           file("alpha"),
			"b":           file("bravo"),
			"d":           dir(),
			"d/x":         file("x"),
			"d/sub/y":     file("y"),
			"e":           dir(),
			"e/keep":      file("keep"),
			"e/edit":      file("edit"),
			"e/gone":      file("gone"),
			"e/gonedir":   dir(),
			"e/gonedir/z": file("z"),
			"ln":          symlink("a"),
			"f":           fifo(),
			"tty":         chardev(4, 1),
			"empty":       dir(),
		}
	}
	cases := []struct {
		name  string
		upper fx
		want  []string
	}{
		{"empty upper changes nothing", fx{}, nil},
		{"copied up but unchanged", fx{
			"a": file("alpha").x(origin, "o"), "d": dir().x(origin, "o").x("trusted.overlay.impure", "y"),
			"d/x": file("x").x(origin, "o"), "ln": symlink("a"), "f": fifo(),
		}, nil},
		{"added file and directory with children", fx{
			"new": file("n"), "nd": dir(), "nd/c": file("c"), "nd/s/t": symlink("/abs"),
		}, lines("added nd", "added nd/c", "added nd/s", "added nd/s/t", "added new")},
		{"modified same size", fx{"a": file("ALPHA")}, lines("modified a")},
		{"modified by truncate and append", fx{"a": file("al"), "b": file("bravo!")}, lines("modified a", "modified b")},
		{"metadata: mode, owner, mtime, user xattr", fx{
			"a": file("alpha").mode(0o600), "b": file("bravo").owner(1000, 1000),
			"d": dir(), "d/x": file("x").mtime(5), "ln": symlink("a").x("trusted.mine", "v"),
		}, lines("metadata a", "metadata b", "metadata d/x", "metadata ln")},
		{"ancestors copied up to hold a child are unchanged", fx{
			"d": dir().x(origin, "o"), "d/sub": dir().x(origin, "o"), "d/sub/y": file("Y"),
		}, lines("modified d/sub/y")},
		{"directory metadata", fx{"d": dir().mtime(7), "e": dir().mode(0o700), "empty": dir().x("user.tag", "1")},
			lines("metadata d", "metadata e", "metadata empty")},
		{"whiteouts: file, whole lower dir, nothing when absent", fx{
			"a": whiteout(), "d": whiteout(), "never": whiteout(),
		}, lines("deleted a", "deleted d", "deleted d/sub", "deleted d/sub/y", "deleted d/x")},
		{"whiteout beneath a copied-up dir", fx{"e": dir(), "e/gonedir": whiteout(), "e/gone": whiteout()},
			lines("deleted e/gone", "deleted e/gonedir", "deleted e/gonedir/z")},
		{"opaque over absent is added", fx{"od": opaque(), "od/c": file("c")}, lines("added od", "added od/c")},
		{"opaque over file is a type change", fx{"a": opaque(), "a/c": file("c")}, lines("typechange a", "added a/c")},
		{"opaque over dir is replaced", fx{
			"e": opaque(), "e/keep": file("keep"), "e/edit": file("EDIT"), "e/new": file("n"),
			"e/gonedir": opaque(),
		}, lines("replaced e", "modified e/edit", "deleted e/gone", "replaced e/gonedir", "deleted e/gonedir/z", "added e/new")},
		{"dir over file is a type change with children added", fx{"b": dir(), "b/c": file("c")},
			lines("typechange b", "added b/c")},
		{"file over dir is a type change and the subtree is deleted", fx{"d": file("now a file")},
			lines("typechange d", "deleted d/sub", "deleted d/sub/y", "deleted d/x")},
		{"other types", fx{
			"ln": symlink("b"), "f": file(""), "tty": chardev(4, 2), "a": fifo(), "sock": socket(), "dev": chardev(1, 3),
		}, lines("typechange a", "added dev", "typechange f", "modified ln", "added sock", "modified tty")},
		{"device metadata only", fx{"tty": chardev(4, 1).owner(0, 5)}, lines("metadata tty")},
		{"root metadata", fx{".": dir().mode(0o700)}, lines("metadata .")},
		{"private xattrs are not user data", fx{
			"a": file("alpha").x(origin, "1").x("trusted.overlay.nlink", "2").x("trusted.overlay.uuid", "u").
				x("trusted.overlay.protattr", "p").x("trusted.overlay.upper", "u").x("trusted.overlay.whiteout", ""),
		}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ch, err := readFx(t, c.upper, base(), ReadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			equalLines(t, summary(ch), c.want)
		})
	}
}

func TestStates(t *testing.T) {
	lower := fx{"a": file("alpha"), "b": file("bravo"), "d": dir(), "d/x": file("x"), "ln": symlink("a")}
	upper := fx{
		"a":   file("ALPHA"),
		"b":   file("bravo-longer"),
		"d":   whiteout(),
		"ln":  symlink("b").x("trusted.overlay.overlay.mine", "esc").x("user.z", "1").x("security.a", "2"),
		"new": file("new").mode(0o4755).owner(7, 8),
	}
	ch, err := readFx(t, upper, lower, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[attest.Path]attest.Entry{}
	for _, e := range ch.Entries {
		byPath[e.Path] = e
	}
	sum := func(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }

	a := byPath["a"]
	if !bytes.Equal(a.New.SHA256, sum("ALPHA")) || !bytes.Equal(a.Old.SHA256, sum("alpha")) {
		t.Errorf("a: same size: both layers must be hashed: %+v %+v", a.Old, a.New)
	}
	b := byPath["b"]
	if !bytes.Equal(b.New.SHA256, sum("bravo-longer")) || b.Old.SHA256 != nil || b.Old.Size != 5 || b.New.Size != 12 {
		t.Errorf("b: size differs: only upper hashed: %+v %+v", b.Old, b.New)
	}
	if x := byPath["d/x"]; x.New != nil || x.Old == nil || x.Old.Type != attest.File || x.Old.Size != 1 {
		t.Errorf("d/x deleted: %+v", x)
	}
	ln := byPath["ln"]
	wantX := []attest.Xattr{{Name: "security.a", Value: []byte("2")}, {Name: "trusted.overlay.mine", Value: []byte("esc")}, {Name: "user.z", Value: []byte("1")}}
	if ln.New.Target != "b" || ln.Old.Target != "a" || !xattrsEqual(ln.New.Xattrs, wantX) {
		t.Errorf("ln: %+v -> %+v", ln.Old, ln.New)
	}
	n := byPath["new"]
	if n.Old != nil || n.New.Type != attest.File || n.New.Mode != 0o4755 || n.New.UID != 7 || n.New.GID != 8 || n.New.MtimeNS != fxMtime || !bytes.Equal(n.New.SHA256, sum("new")) {
		t.Errorf("new: %+v", n.New)
	}
	if ch.Stats.BytesHashed != 5+5+12+3 {
		t.Errorf("bytes hashed %d", ch.Stats.BytesHashed)
	}
	if ch.Stats.UpperEntries != 6 || ch.Stats.LowerEntries != 1+5+1 {
		t.Errorf("stats %+v", ch.Stats)
	}
}

func xattrsEqual(a, b []attest.Xattr) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || !bytes.Equal(a[i].Value, b[i].Value) {
			return false
		}
	}
	return true
}

func TestUserXattrNamespace(t *testing.T) {
	lower := fx{"a": file("a"), "d": dir(), "d/x": file("x")}
	upper := fx{
		"a": file("a").x("user.overlay.origin", "o").x("trusted.overlay.opaque", "y"),
		"d": dir().x("user.overlay.opaque", "y"),
	}
	ch, err := readFx(t, upper, lower, ReadOptions{XattrNS: "user"})
	if err != nil {
		t.Fatal(err)
	}
	// With userxattr the trusted.overlay.* xattr is the user's data.
	equalLines(t, summary(ch), lines("metadata a", "replaced d", "deleted d/x"))
}

func TestFailClosed(t *testing.T) {
	lower := fx{"d": dir(), "f": file("f")}
	for name, upper := range map[string]fx{
		"redirect":         {"d": dir().x("trusted.overlay.redirect", "/elsewhere")},
		"metacopy":         {"f": file("f").x("trusted.overlay.metacopy", "")},
		"opaque x":         {"d": dir().x("trusted.overlay.opaque", "x")},
		"opaque other":     {"d": dir().x("trusted.overlay.opaque", "n")},
		"opaque root":      {".": opaque()},
		"xattr whiteout":   {"f": file("").x("trusted.overlay.whiteout", "")},
		"deep redirect":    {"n/m/o": file("o").x("trusted.overlay.redirect", "x")},
		"user ns redirect": {"f": file("f").x("trusted.overlay.redirect", "x")},
	} {
		t.Run(name, func(t *testing.T) {
			opt := ReadOptions{}
			want := true
			if name == "user ns redirect" {
				opt.XattrNS = "user" // trusted.overlay.* is data then
				want = false
			}
			ch, err := readFx(t, upper, lower, opt)
			if got := errors.Is(err, ErrForeignUpper); got != want {
				t.Fatalf("errors.Is(%v, ErrForeignUpper) = %v, want %v", err, got, want)
			}
			if want && ch != nil {
				t.Errorf("a foreign layer must yield no change list")
			}
		})
	}
}

func TestOddNames(t *testing.T) {
	lower := fx{"a": dir(), "a/b": file("b"), "sp ace": file("s")}
	upper := fx{
		"a-c":                 file("x"),
		"a":                   dir(),
		"a/b":                 file("B"),
		"new\nline":           file("nl"),
		"bad\xff\xfe":         dir(),
		"bad\xff\xfe/\x01ctl": symlink("\xff"),
		"sp ace":              whiteout(),
		"-":                   file("dash"),
	}
	ch, err := readFx(t, upper, lower, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Sorted by bytes: "a-c" < "a/b" because '-' < '/'.
	equalLines(t, summary(ch), lines("added -", "added a-c", "modified a/b", "added bad\xff\xfe", "added bad\xff\xfe/\x01ctl", "added new\nline", "deleted sp ace"))
	for _, e := range ch.Entries {
		if e.Path == "bad\xff\xfe/\x01ctl" && e.New.Target != "\xff" {
			t.Errorf("target %q", e.New.Target)
		}
	}
}

func TestHardLinks(t *testing.T) {
	lower := fx{"a": file("shared"), "w": file("w")}
	upper := fx{
		"a":      file("shared").x(origin, "o"),
		"b":      file("shared").link("a"),
		"z/late": file("shared").link("a"),
		"n1":     file("own"),
		"n0":     file("own").link("n1"),
		"solo":   file("solo"),
		"w":      whiteout(),
		"w2":     whiteout(),
	}
	ch, err := readFx(t, upper, lower, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	equalLines(t, summary(ch), lines("added b", "added n0", "added n1", "added solo", "deleted w", "added z", "added z/late"))
	want := map[attest.Path]attest.Path{"b": "a", "z/late": "a", "n0": "n0", "n1": "n0", "solo": "", "w": ""}
	for _, e := range ch.Entries {
		var got attest.Path
		if e.New != nil {
			got = e.New.Link
		}
		if got != want[e.Path] {
			t.Errorf("%q: Link %q, want %q", e.Path, got, want[e.Path])
		}
	}
}

func TestFaults(t *testing.T) {
	lower := fx{"d": dir(), "d/x": file("x"), "e": dir(), "e/y": file("y"), "f": file("f"), "g": file("g")}
	cases := []struct {
		name  string
		upper fx
		lower fx
		want  []string
	}{
		{"unreadable upper entry", fx{"n": file("n").fail("lstat", unix.EACCES), "m": file("m")},
			nil, lines("added m", "!unreadable n")},
		{"listed then gone", fx{"n": file("n").fail("lstat", unix.ENOENT)}, nil, lines("!vanished n")},
		{"swapped between lstat and open", fx{"n": file("n").fail("open", errSwapped)}, nil, lines("!vanished n")},
		{"symlink swapped in", fx{"d": dir().fail("open", unix.ELOOP), "d/q": file("q")}, nil, lines("!vanished d")},
		{"changed while hashed", fx{"f": file("F").fail("digest", errSwapped)}, nil, lines("!vanished f")},
		{"unreadable xattrs", fx{"f": file("f").fail("xattrs", unix.EACCES)}, nil, lines("!unreadable f")},
		{"unreadable upper dir listing", fx{"d": dir().mtime(1).fail("names", unix.EACCES), "d/x": file("X")},
			nil, lines("metadata d", "!unreadable d")},
		{"unreadable lower entry", fx{"f": file("F")}, fx{"f": file("f").fail("lstat", unix.EACCES)}, lines("!unreadable f")},
		{"unreadable lower file content", fx{"f": file("F")}, fx{"f": file("f").fail("digest", unix.EIO)}, lines("!unreadable f")},
		{"deleted lower subtree partly unreadable", fx{"d": whiteout()},
			fx{"d": dir().fail("names", unix.EACCES), "d/x": file("x")}, lines("deleted d", "!unreadable d")},
		{"deleted lower entry that cannot be opened is still deleted", fx{"d": whiteout()},
			fx{"d": dir(), "d/x": file("x").fail("open", unix.EACCES)}, lines("deleted d", "deleted d/x", "!unreadable d/x")},
		{"opaque dir whose lower listing fails", fx{"e": opaque(), "e/y": file("y")},
			fx{"e": dir().fail("names", unix.EACCES), "e/y": file("y")}, lines("replaced e", "!unreadable e")},
		{"a mount appeared at the name", fx{"n": dir().fail("open", unix.EXDEV)}, nil, lines("!other-mount n")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := c.lower
			if l == nil {
				l = lower
			}
			ch, err := readFx(t, c.upper, l, ReadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			equalLines(t, summary(ch), c.want)
		})
	}
}

func TestMounts(t *testing.T) {
	lower := fx{"d": dir(), "d/x": file("x"), "m": dir().mount(2), "m/in": file("in")}
	t.Run("upper entry on another mount", func(t *testing.T) {
		ch, err := readFx(t, fx{"sub": dir().mount(3), "sub/f": file("f"), "ok": file("ok")}, fx{}, ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		equalLines(t, summary(ch), lines("added ok", "!other-mount sub"))
	})
	t.Run("lower entry on another mount", func(t *testing.T) {
		ch, err := readFx(t, fx{"m": dir(), "m/in": file("IN"), "d": whiteout()}, lower, ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		equalLines(t, summary(ch), lines("deleted d", "deleted d/x", "!other-mount m"))
	})
	t.Run("lower mount inside a deleted subtree", func(t *testing.T) {
		low := fx{"d": dir(), "d/x": file("x"), "d/m": dir().mount(2), "d/m/in": file("in")}
		ch, err := readFx(t, fx{"d": whiteout()}, low, ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		equalLines(t, summary(ch), lines("deleted d", "deleted d/x", "!other-mount d/m"))
	})
	t.Run("no mount IDs: st_dev only, and said so", func(t *testing.T) {
		// A bind mount of the same filesystem differs only in mount ID,
		// so without mount IDs it cannot be seen; another st_dev still is.
		upper := fx{"m": dir(), "m/in": file("IN"), "other": dir().dev(9), "other/q": file("q")}
		ch, err := readFx(t, upper, lower, ReadOptions{NoMountID: true})
		if err != nil {
			t.Fatal(err)
		}
		equalLines(t, summary(ch), lines("modified m/in", "!no-mount-id ", "!other-mount other"))
	})
	t.Run("kernel gives no mount ID", func(t *testing.T) {
		ch, err := readFx(t, fx{".": dir().noMountID(), "f": file("f").noMountID()}, fx{".": dir().noMountID()}, ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		equalLines(t, summary(ch), lines("added f", "!no-mount-id "))
	})
}

func TestBudgets(t *testing.T) {
	lower := fx{"d": dir(), "d/1": file("1"), "d/2": file("2"), "d/3": file("3"), "big": file("0123456789"), "same": file("0123456789")}
	t.Run("entry budget", func(t *testing.T) {
		upper := fx{"a": file("a"), "b": file("b"), "c": file("c"), "d": whiteout()}
		ch, err := readFx(t, upper, lower, ReadOptions{MaxEntries: 5})
		if err != nil {
			t.Fatal(err)
		}
		// Roots (2) + a (upper, lower) + b (upper) = 5 examined, then stop.
		equalLines(t, summary(ch), lines("added a", "!entry-budget b"))
	})
	t.Run("entry budget inside a deleted subtree", func(t *testing.T) {
		// Roots (2) + d (upper, lower) + d/1, d/2 = 6: d/3 is one too many.
		ch, err := readFx(t, fx{"d": whiteout()}, lower, ReadOptions{MaxEntries: 6})
		if err != nil {
			t.Fatal(err)
		}
		equalLines(t, summary(ch), lines("deleted d", "deleted d/1", "deleted d/2", "!entry-budget d/3"))
	})
	t.Run("deadline", func(t *testing.T) {
		ch, err := readFx(t, fx{"a": file("a")}, lower, ReadOptions{Deadline: time.Now().Add(-time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		equalLines(t, summary(ch), lines("!time-budget a"))
	})
	t.Run("per-directory limit", func(t *testing.T) {
		upper := fx{"d": dir().mtime(3), "d/1": file("one"), "d/2": whiteout(), "d/3": file("three"), "e/x": file("x")}
		ch, err := readFx(t, upper, lower, ReadOptions{MaxDirEntries: 2})
		if err != nil {
			t.Fatal(err)
		}
		equalLines(t, summary(ch), lines("metadata d", "added e", "added e/x", "!dir-entry-limit d"))
	})
	t.Run("digest cap", func(t *testing.T) {
		upper := fx{
			"big":  file("9876543210"),          // same size and mtime: unchanged as far as can be told
			"same": file("abcdefghij").mtime(1), // mtime differs: modified
			"new":  file("a new big file"),      // added, not hashed
			"tiny": file("t"),                   // under the cap: hashed
		}
		ch, err := readFx(t, upper, lower, ReadOptions{DigestCap: 9})
		if err != nil {
			t.Fatal(err)
		}
		equalLines(t, summary(ch), lines("added new", "modified same", "added tiny",
			"!digest-cap big", "!digest-cap new", "!digest-cap same"))
		for _, e := range ch.Entries {
			if (e.Path == "tiny") != (e.New.SHA256 != nil) {
				t.Errorf("%q: SHA256 %x", e.Path, e.New.SHA256)
			}
		}
		if ch.Stats.BytesHashed != 1 {
			t.Errorf("bytes hashed %d, want 1", ch.Stats.BytesHashed)
		}
	})
}

func TestRootsMissing(t *testing.T) {
	t.Run("lower missing: everything is added, and said so", func(t *testing.T) {
		ch, err := readFx(t, fx{"a": file("a"), "w": whiteout()}, nil, ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		equalLines(t, summary(ch), lines("added a"))
	})
	dir := t.TempDir()
	existing := filepath.Join(dir, "exists")
	if err := os.Mkdir(existing, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(existing, "f"), []byte("f"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Mount IDs are looked for only once the upper root is open.
	noMountID := mountIDLines(t)
	for _, c := range []struct {
		name, upper, lower string
		want               []string
	}{
		{"upper missing", filepath.Join(dir, "nope"), existing, lines("!root-missing .")},
		{"lower missing", existing, filepath.Join(dir, "nope"), append(lines("added f", "!root-missing ."), noMountID...)},
		{"both missing", filepath.Join(dir, "nope"), filepath.Join(dir, "nope2"), lines("!root-missing .", "!root-missing .")},
		{"upper is a file", filepath.Join(existing, "f"), existing, lines("!root-missing .")},
	} {
		t.Run(c.name, func(t *testing.T) {
			ch, err := Read(c.upper, c.lower, ReadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got := summary(ch)
			// The roots' own metadata may differ too; only the rest matters here.
			if len(got) > 0 && got[0] == "metadata ." {
				got = got[1:]
			}
			equalLines(t, got, c.want)
		})
	}
}

func TestReadOptionsValidation(t *testing.T) {
	for _, o := range []ReadOptions{{XattrNS: "security"}, {DigestCap: -1}, {MaxEntries: -1}, {MaxDirEntries: -5}} {
		if _, err := Read(t.TempDir(), t.TempDir(), o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
	o, err := ReadOptions{}.withDefaults()
	if err != nil || o.XattrNS != DefaultXattrNS || o.DigestCap != DefaultDigestCap || o.MaxEntries != DefaultMaxEntries || o.MaxDirEntries != DefaultMaxDirEntries {
		t.Errorf("defaults: %+v %v", o, err)
	}
}

func TestWorkIndex(t *testing.T) {
	up, low, work := t.TempDir(), t.TempDir(), t.TempDir()
	if _, err := Read(up, low, ReadOptions{WorkDir: work}); err != nil {
		t.Fatalf("no index dir: %v", err)
	}
	if err := os.Mkdir(filepath.Join(work, "index"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(up, low, ReadOptions{WorkDir: work}); err != nil {
		t.Fatalf("empty index dir: %v", err)
	}
	if err := os.WriteFile(filepath.Join(work, "index", "00fb"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(up, low, ReadOptions{WorkDir: work}); !errors.Is(err, ErrForeignUpper) {
		t.Fatalf("non-empty index dir: %v", err)
	}
}

// TestReadRealTree reads plain directories (no overlay, no root needed):
// every type is reported, a FIFO is never opened for reading (the test
// would hang), and content is hashed.
func TestReadRealTree(t *testing.T) {
	upper, lower := t.TempDir(), t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(upper, "f"), []byte("data"), 0o640))
	must(os.Symlink("../../etc/passwd", filepath.Join(upper, "ln")))
	must(unix.Mkfifo(filepath.Join(upper, "pipe"), 0o600))
	must(os.MkdirAll(filepath.Join(upper, "d", "e"), 0o755))
	must(os.WriteFile(filepath.Join(upper, "d", "e", "g"), nil, 0o600))
	ch, err := Read(upper, lower, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := summary(ch)
	if len(got) > 0 && got[0] == "metadata ." {
		got = got[1:] // two temp dirs made at different times
	}
	equalLines(t, got, append(lines("added d", "added d/e", "added d/e/g", "added f", "added ln", "added pipe"), mountIDLines(t)...))
	sum := sha256.Sum256([]byte("data"))
	for _, e := range ch.Entries {
		switch e.Path {
		case "f":
			if !bytes.Equal(e.New.SHA256, sum[:]) || e.New.Mode != 0o640 || e.New.Size != 4 {
				t.Errorf("f: %+v", e.New)
			}
		case "ln":
			if e.New.Type != attest.Symlink || e.New.Target != "../../etc/passwd" {
				t.Errorf("ln: %+v", e.New)
			}
		case "pipe":
			if e.New.Type != attest.FIFO || e.New.SHA256 != nil {
				t.Errorf("pipe: %+v", e.New)
			}
		}
	}
}

// TestFSNodeSwaps checks the real tree's identity checks: a name whose file
// changed after lstat, a directory replaced by a symlink, and a file
// written while it is open all fail as swapped or vanished.
func TestFSNodeSwaps(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "f"), []byte("one"), 0o644))
	must(os.Mkdir(filepath.Join(dir, "d"), 0o755))
	root, err := openFSRoot(dir)
	must(err)
	defer root.close()

	st, err := root.lstat("f")
	must(err)
	must(os.WriteFile(filepath.Join(dir, "f"), []byte("two!"), 0o644))
	if _, err := root.open("f", st); !errors.Is(err, errSwapped) {
		t.Errorf("file rewritten after lstat: %v, want errSwapped", err)
	}

	st, err = root.lstat("d")
	must(err)
	must(os.Remove(filepath.Join(dir, "d")))
	must(os.Symlink("/", filepath.Join(dir, "d")))
	if _, err := root.open("d", st); !errors.Is(err, unix.ENOTDIR) && !errors.Is(err, unix.ELOOP) {
		t.Errorf("dir replaced by a symlink: %v", err)
	}

	st, err = root.lstat("f")
	must(err)
	n, err := root.open("f", st)
	must(err)
	defer n.close()
	must(os.WriteFile(filepath.Join(dir, "f"), []byte("three"), 0o644))
	if _, err := n.digest(time.Time{}, false); !errors.Is(err, errSwapped) {
		t.Errorf("file written while open: %v, want errSwapped", err)
	}
}

// TestFSNodeDigestFlushProtectsMappings: a digest with flush writes the
// file back first, so a write through a shared mapping made afterwards
// stamps ctime (the stat after the read catches it), even when the page
// was dirty and mapped writable before. Without flush it stamps nothing
// unless the kernel happened to write the page back in between (it may,
// under memory pressure from other tests), so that control is tried up
// to five times and must hold once.
func TestFSNodeDigestFlushProtectsMappings(t *testing.T) {
	dir := t.TempDir()
	if stamped, err := probe.MappedWritesStamped(dir); err != nil || !stamped {
		t.Fatalf("this test needs a filesystem that stamps writes through mappings: %t, %v", stamped, err)
	}
	if !mappedWriteStamped(t, dir, true) {
		t.Error("with flush, a write through the mapping after the digest stamped no ctime")
	}
	for try := 1; mappedWriteStamped(t, dir, false); try++ {
		if try == 5 {
			t.Fatal("without flush, a write through an already dirty mapping stamped ctime in 5 tries of 5: the test shows nothing here")
		}
	}
}

// mappedWriteStamped dirties a mapped page of a new file in dir, digests
// the file (with flush or not), writes through the mapping again and
// reports whether that write stamped ctime.
func mappedWriteStamped(t *testing.T, dir string, flush bool) bool {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.CreateTemp(dir, "mapped")
	must(err)
	defer f.Close()
	must(f.Truncate(4096))
	m, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	must(err)
	defer unix.Munmap(m)
	m[0] = 'A' // the page is now dirty and mapped writable
	time.Sleep(20 * time.Millisecond)
	root, err := openFSRoot(dir)
	must(err)
	defer root.close()
	name := filepath.Base(f.Name())
	st, err := root.lstat(name)
	must(err)
	n, err := root.open(name, st)
	must(err)
	defer n.close()
	_, err = n.digest(time.Time{}, flush)
	must(err)
	time.Sleep(20 * time.Millisecond)
	m[1] = 'B'
	after, err := root.lstat(name)
	must(err)
	return after.CtimeNS != st.CtimeNS
}
