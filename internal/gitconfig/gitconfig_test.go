package gitconfig

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestParse(t *testing.T) {
	in := "\xef\xbb\xbf# comment\n" +
		"[Core]\n" +
		"\tHooksPath = .husky # trailing comment\n" +
		"\tbare\n" +
		"[core] editor = \"vim  -f\" ; after\n" +
		"[remote \"Origin \\\"x\\\\\"]\n" +
		"  url = a\\\n  b\\tc \"#not;comment\"  \n" +
		"[Branch.Main]\n remote=origin\r\n" +
		"[includeIf \"gitdir:~/w/\"]\n path = x.inc\n"
	got, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{Section: "core", Key: "hookspath", Value: ".husky", Line: 3},
		{Section: "core", Key: "bare", NoValue: true, Line: 4},
		{Section: "core", Key: "editor", Value: "vim  -f", Line: 5},
		{Section: "remote", Subsection: "Origin \"x\\", Key: "url", Value: "a  b\tc #not;comment", Line: 7},
		{Section: "branch", Subsection: "main", Key: "remote", Value: "origin", Line: 10},
		{Section: "includeif", Subsection: "gitdir:~/w/", Key: "path", Value: "x.inc", Line: 12},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d entries %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if got[0].Name() != "core.hookspath" || got[3].Name() != "remote.Origin \"x\\.url" {
		t.Errorf("names %q %q", got[0].Name(), got[3].Name())
	}
}

// TestParseLikeGit checks settings and refusals against git's own reading
// of the same files.
func TestParseLikeGit(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("git is needed to compare with (scripts/setup installs it): %v", err)
	}
	for _, in := range []string{
		"[core]\n\thooksPath = \"  a b\" c\\\\d  # x\n[x \"Y\"] k = 1\\\n2\n",
		"[a]\n\tk\n", "[a]k=v\n", "[a \"b\"]k = \"x\"y\"z\" # c\n", "[a.B.c]\nk=v\n",
		"[a]\nk=\n", "[a]\nk = ; c\n", "[a]\n\tk = v\t \r\n", "[a \"x\\\\y\\z\"]\nk=v\n", "[A-B]\nK-1 = 2\n",
		"[a]\nk = \"a ; b\" ; c\n", "[a]   \nk=1\n", "[a] # c\nk=1\n", "[a]\nk=1 \\\n\n", "[a \"b\"  ]\nk=1\n",
		"[a]\n\n\n k \n", "[a]\nk = v\\q\n", "[a\n", "k = v\n", "[a]\nk v\n",
	} {
		f := filepath.Join(t.TempDir(), "config")
		os.WriteFile(f, []byte(in), 0o644)
		out, gerr := exec.Command(git, "config", "--file", f, "--list", "-z").Output()
		got, err := Parse(strings.NewReader(in))
		if (err == nil) != (gerr == nil) {
			t.Errorf("%q: ours %v, git's %v", in, err, gerr)
			continue
		}
		var ours []string
		for _, e := range got {
			if e.NoValue {
				ours = append(ours, e.Name())
			} else {
				ours = append(ours, e.Name()+"\n"+e.Value)
			}
		}
		if a, b := strings.Join(ours, "\x00"), strings.TrimSuffix(string(out), "\x00"); a != b {
			t.Errorf("%q: ours %q, git's %q", in, a, b)
		}
	}
}

func TestParseBad(t *testing.T) {
	for _, in := range []string{
		"[core\n",         // unclosed
		"[]\n",            // empty name
		"[co re]\n",       // a space, no subsection
		"[a \"b]\n",       // unclosed subsection
		"[a \"b\" ]\n",    // junk after the quote
		"[a_b]\n",         // bad name
		"[a]\n1key = v\n", // key starts with a digit
		"[a]\nk_ey = v\n", // bad key
		"[a]\nk v\n",      // no '='
		"[a]\nk = \"v\n",  // unterminated quote
		"[a]\nk = \\q\n",  // bad escape
		"[a \"x\ny\"]\n",  // newline in a subsection
		"[a]\nk = v\\",    // escape at the end
	} {
		if _, err := Parse(strings.NewReader(in)); !errors.Is(err, ErrSyntax) {
			t.Errorf("Parse(%q) = %v, want ErrSyntax", in, err)
		}
	}
	if _, err := Parse(strings.NewReader("[a]\nk = v\n\nk = \"v\n")); err == nil || !strings.HasSuffix(err.Error(), "line 4: unterminated quote") {
		t.Errorf("error %v does not name line 4", err)
	}
	if _, err := Parse(strings.NewReader("#" + strings.Repeat("x", MaxSize))); err == nil {
		t.Error("a file larger than MaxSize was read")
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	write := func(p, s string) {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(home, ".gitconfig"), "[core]\nhooksPath = a\n[include]\npath = ~/inc\npath = %(prefix)/etc/x\n")
	write(filepath.Join(home, "inc"), "[core]\nhooksPath = b\n[includeIf \"onbranch:x\"]\npath = sub/cond\n")
	write(filepath.Join(home, "sub/cond"), "[core]\nhooksPath = c\n[include]\npath = ../missing\n")
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	settings, files, err := Load([]Source{{Path: filepath.Join(dir, "none")}, {Path: filepath.Join(home, ".gitconfig")}}, home)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range settings {
		if s.Name() == "core.hookspath" {
			got = append(got, s.Value+map[bool]string{true: "?", false: ""}[s.Conditional])
		}
	}
	if strings.Join(got, " ") != "a b c?" {
		t.Errorf("hooksPath settings %q", got)
	}
	wantFiles := []string{filepath.Join(dir, "none"), filepath.Join(home, ".gitconfig"), filepath.Join(home, "inc"),
		filepath.Join(home, "sub/cond"), filepath.Join(home, "missing")}
	if strings.Join(files, " ") != strings.Join(wantFiles, " ") {
		t.Errorf("files %q, want %q", files, wantFiles)
	}
	// A FIFO is refused without blocking; an include loop stops at MaxDepth.
	if _, _, err := Load([]Source{{Path: filepath.Join(dir, "fifo")}}, home); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("FIFO: %v", err)
	}
	write(filepath.Join(dir, "loop"), "[include]\npath = loop\n")
	if _, _, err := Load([]Source{{Path: filepath.Join(dir, "loop")}}, home); err == nil || !strings.Contains(err.Error(), "nested deeper") {
		t.Errorf("include loop: %v", err)
	}
	write(filepath.Join(dir, "bad"), "[core]\nhooksPath = \"x\n")
	if _, _, err := Load([]Source{{Path: filepath.Join(dir, "bad")}}, home); !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), filepath.Join(dir, "bad")) {
		t.Errorf("bad file: %v", err)
	}
}

// FuzzParse: any input is parsed or refused with ErrSyntax, never a
// panic; settings come in line order, with lower-case names.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"[core]\n\thooksPath = .husky\n", "[a \"b\\\"c\"] k = \"v;\" # x\\\n", "k\n[x.Y]\nk=1\\\n2\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		es, err := Parse(strings.NewReader(in))
		if err != nil {
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("Parse(%q): %v, not ErrSyntax", in, err)
			}
			return
		}
		line := 1
		for _, e := range es {
			if e.Line < line || e.Section != strings.ToLower(e.Section) || e.Key != strings.ToLower(e.Key) || e.Key == "" {
				t.Fatalf("Parse(%q): entry %+v after line %d", in, e, line)
			}
			line = e.Line
		}
	})
}
