package overlay

import (
	"slices"
	"testing"

	"github.com/layerseal/layerseal/attest"
)

// TestExcludedGrantsItemized: in an excluded subtree, the entries that may
// let someone new write are itemized (with their subtrees), and an
// ordinary tree of one owner and one umask stays counted.
func TestExcludedGrantsItemized(t *testing.T) {
	acl := "\x02\x00\x00\x00" // any value: only its presence is looked at here
	cases := []struct {
		name  string
		upper fx
		want  []attest.Path // itemized beneath node_modules
	}{
		{"ordinary", fx{"node_modules/a/b": file("x"), "node_modules/a/c/": dir()}, nil},
		{"umask 002 in a group-writable tree", fx{".": dir().mode(0o775), "node_modules": dir().mode(0o775),
			"node_modules/a": dir().mode(0o775), "node_modules/a/b": file("x").mode(0o664)}, nil},
		{"o+w file", fx{"node_modules/a/b": file("x").mode(0o666)}, []attest.Path{"node_modules/a/b"}},
		{"g+w dir", fx{"node_modules/a": dir().mode(0o775), "node_modules/a/b": file("x")}, []attest.Path{"node_modules/a", "node_modules/a/b"}},
		{"other owner", fx{"node_modules/a/b": file("x").owner(1000, 0)}, []attest.Path{"node_modules/a/b"}},
		{"root under another owner", fx{".": dir().owner(1000, 1000), "node_modules": dir().owner(1000, 1000),
			"node_modules/a": dir().owner(1000, 1000), "node_modules/a/b": file("x").owner(0, 0)}, nil},
		{"other group, g+w", fx{".": dir().mode(0o775), "node_modules": dir().mode(0o775),
			"node_modules/a": dir().mode(0o775), "node_modules/a/b": file("x").mode(0o664).owner(0, 50)}, []attest.Path{"node_modules/a/b"}},
		{"access ACL behind the group bits", fx{".": dir().mode(0o775), "node_modules": dir().mode(0o775),
			"node_modules/a": dir().mode(0o775), "node_modules/a/b": file("x").mode(0o674).x("system.posix_acl_access", acl)}, []attest.Path{"node_modules/a/b"}},
		{"default ACL", fx{"node_modules/a": dir().x("system.posix_acl_default", acl), "node_modules/a/b": file("x")}, []attest.Path{"node_modules/a", "node_modules/a/b"}},
		{"setgid dir", fx{"node_modules/a": dir().mode(0o2755), "node_modules/a/b": file("x")}, []attest.Path{"node_modules/a", "node_modules/a/b"}},
		{"symlink", fx{"node_modules/a": symlink("b")}, nil},
	}
	for _, c := range cases {
		lower := fx{}
		if root := c.upper["."]; root != nil {
			lower["."] = root
		}
		ch, err := readFx(t, c.upper, lower, ReadOptions{Exclude: func(p attest.Path) bool { return p == "node_modules" }})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var got []attest.Path
		for _, e := range ch.Entries {
			if attest.Within(e.Path, "node_modules") {
				got = append(got, e.Path)
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: itemized %q, want %q", c.name, got, c.want)
		}
	}
}
