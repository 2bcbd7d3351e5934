package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/posixacl"
)

// TestMetadataShown: an agent's chmod (an executable bit git keeps, and
// one it does not), chown, a POSIX ACL entry, an xattr (its name and
// value terminal escapes) and a `touch -d` are each said with their old
// and new values by diff, diff --patch (which git apply still takes),
// show, and the --json of both; a file both edited and chmodded gets its
// mode after its "M". Every change here gives no one write access.
func TestMetadataShown(t *testing.T) {
	e := newEnv(t)
	write(t, e.ws, map[string]string{"script.sh": "#!/bin/sh\n", "private.txt": "p\n", "owned.txt": "o\n", "acl.txt": "a\n",
		"note.txt": "n\n", "touched.txt": "t\n", "mod.sh": "m\n", "same.txt": "s\n"})
	if err := os.Lchown(filepath.Join(e.ws, "owned.txt"), 1000, 1000); err != nil {
		t.Fatal(err)
	}
	aclValue := posixacl.Encode(posixacl.ACL{{Tag: posixacl.TagUserObj, Perm: 6}, {Tag: posixacl.TagUser, ID: 1000, Perm: 4},
		{Tag: posixacl.TagGroupObj, Perm: 4}, {Tag: posixacl.TagMask, Perm: 4}, {Tag: posixacl.TagOther, Perm: 4}})
	out, _ := e.stagedRun("s", fmt.Sprintf(`chmod 0755 script.sh; chmod 0600 private.txt; chown 0:50 owned.txt
setfattr -n system.posix_acl_access -v 0x%x acl.txt
setfattr -n user.note -v x note.txt; setfattr -n "$(printf 'user.\033[31mred')" -v "$(printf '\033[2J')" note.txt
TZ=UTC touch -d '2021-02-03 04:05:06' touched.txt
echo more >> mod.sh; chmod 0755 mod.sh`, aclValue))

	want := map[string]string{
		"script.sh":   "mode 0644 -> 0755",
		"private.txt": "mode 0644 -> 0600",
		"owned.txt":   "uid 1000 -> 0; gid 1000 -> 50",
		"acl.txt":     "acl +user:1000:r--, +mask::r--",
		"note.txt":    `xattr +user.%1B[31mred="\x1b[2J", +user.note="x"`,
		"touched.txt": "mtime 2020-01-02T03:04:05.000006Z -> 2021-02-03T04:05:06Z",
		"mod.sh":      "mode 0644 -> 0755",
	}
	lines := func(view, text string) {
		t.Helper()
		for p, m := range want {
			code := "m"
			if p == "mod.sh" {
				code = "M"
			}
			if line := code + "  " + p + "\t" + m + "\n"; !strings.Contains(text, line) {
				t.Errorf("%s lacks %q:\n%s", view, line, text)
			}
		}
		if strings.Contains(text, "same.txt") || strings.Contains(text, "\x1b") {
			t.Errorf("%s lists an unchanged file or prints a raw escape:\n%q", view, text)
		}
	}
	lines("diff", e.mustCLI(0, "diff", "--state-dir", e.state, out))
	lines("show", e.mustCLI(0, "show", "--key", e.pub, filepath.Join(out, "statement.json")))

	code, patch, stderr := e.cli("diff", "--state-dir", e.state, "--patch", out)
	if code != 0 {
		t.Fatalf("diff --patch: exit %d: %s", code, stderr)
	}
	for p, m := range want {
		if line := "# metadata of " + p + ": " + m + "\n"; !strings.Contains(patch, line) {
			t.Errorf("patch lacks %q:\n%s", line, patch)
		}
	}
	for _, w := range []string{"diff --git a/script.sh b/script.sh\nold mode 100644\nnew mode 100755\n",
		"diff --git a/mod.sh b/mod.sh\nold mode 100644\nnew mode 100755\n"} {
		if !strings.Contains(patch, w) {
			t.Errorf("patch lacks git's %q:\n%s", w, patch)
		}
	}
	if n := strings.Count(patch, "diff --git"); n != 2 || strings.Contains(patch, "\x1b") {
		t.Errorf("patch has %d blocks (want 2: git keeps no other change here) or a raw escape:\n%q", n, patch)
	}
	colored := e.mustCLI(0, "diff", "--state-dir", e.state, "--patch", "--color", "always", out)
	if !strings.Contains(colored, "\x1b[1m# metadata of note.txt: "+want["note.txt"]+"\x1b[m\n") || strings.Contains(colored, "\x1b[2J") || strings.Contains(colored, "\x1b[31mred") {
		t.Errorf("coloured patch: the note is not one bold line, or the agent's escapes got through:\n%q", colored)
	}
	pf := filepath.Join(e.dir, "s.patch")
	if err := os.WriteFile(pf, []byte(patch), 0o644); err != nil {
		t.Fatal(err)
	}
	gitIn(t, e.ws, "apply", "--check", pf)
	if stat := e.mustCLI(0, "diff", "--state-dir", e.state, "--stat", out); !strings.Contains(stat, " 2 files changed, 1 insertion(+)") {
		t.Errorf("diffstat is not git's (mode changes of script.sh and mod.sh, one line added):\n%s", stat)
	}

	// The JSON's typed fields, read as a client would.
	type change struct {
		Old int64 `json:"old"`
		New int64 `json:"new"`
	}
	type metaChanges struct {
		Changes []struct {
			Path attest.Path `json:"path"`
			Meta *struct {
				Mode  *change `json:"mode"`
				UID   *change `json:"uid"`
				GID   *change `json:"gid"`
				Mtime *struct {
					Old int64 `json:"old_ns,string"`
					New int64 `json:"new_ns,string"`
				} `json:"mtime"`
				ACL []struct {
					Change  string  `json:"change"`
					Entry   string  `json:"entry"`
					Tag     string  `json:"tag"`
					Perms   string  `json:"perms"`
					ID      *uint32 `json:"id"`
					Default bool    `json:"default"`
				} `json:"acl"`
				Xattrs []struct {
					Name     attest.Bytes `json:"name"`
					Change   string       `json:"change"`
					NewSize  int          `json:"new_size"`
					NewValue []byte       `json:"new_value"`
				} `json:"xattrs"`
			} `json:"meta"`
		} `json:"changes"`
	}
	wantJSON := map[string]string{
		"script.sh":   "mode 420 -> 493",
		"private.txt": "mode 420 -> 384",
		"owned.txt":   "uid 1000 -> 0; gid 1000 -> 50",
		"acl.txt":     "acl added user 1000 r-- user:1000:r-- false; acl added mask <nil> r-- mask::r-- false",
		"note.txt":    `xattr added "user.\x1b[31mred" 4 "\x1b[2J"; xattr added "user.note" 1 "x"`,
		"touched.txt": "mtime 1577934245000006000 -> 1612325106000000000",
		"mod.sh":      "mode 420 -> 493",
	}
	for _, args := range [][]string{{"show", "--json", "--key", e.pub, filepath.Join(out, "statement.json")}, {"diff", "--json", "--state-dir", e.state, out}} {
		var got metaChanges
		code, stdout, stderr := e.cli(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		if err := json.Unmarshal([]byte(stdout), &got, json.RejectUnknownMembers(false)); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, stdout)
		}
		for _, c := range got.Changes {
			var parts []string
			if m := c.Meta; m != nil {
				for _, f := range []struct {
					name string
					c    *change
				}{{"mode", m.Mode}, {"uid", m.UID}, {"gid", m.GID}} {
					if f.c != nil {
						parts = append(parts, fmt.Sprintf("%s %d -> %d", f.name, f.c.Old, f.c.New))
					}
				}
				for _, a := range m.ACL {
					id := "<nil>"
					if a.ID != nil {
						id = fmt.Sprint(*a.ID)
					}
					parts = append(parts, fmt.Sprintf("acl %s %s %s %s %s %t", a.Change, a.Tag, id, a.Perms, a.Entry, a.Default))
				}
				for _, x := range m.Xattrs {
					parts = append(parts, fmt.Sprintf("xattr %s %q %d %q", x.Change, string(x.Name), x.NewSize, x.NewValue))
				}
				if m.Mtime != nil {
					parts = append(parts, fmt.Sprintf("mtime %d -> %d", m.Mtime.Old, m.Mtime.New))
				}
			}
			if got := strings.Join(parts, "; "); got != wantJSON[string(c.Path)] {
				t.Errorf("%s --json: %s's meta is %q, want %q", args[0], c.Path, got, wantJSON[string(c.Path)])
			}
		}
		if len(got.Changes) != len(wantJSON) {
			t.Errorf("%s --json: %d changes, want %d", args[0], len(got.Changes), len(wantJSON))
		}
	}
}
