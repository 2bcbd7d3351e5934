package layerseal

import "testing"

// TestCommandRef: a suggested command line names a session of another
// state dir with that dir, quoted for a shell.
func TestCommandRef(t *testing.T) {
	for _, c := range []struct{ dir, ref, want string }{
		{DefaultStateDir, "abc", "abc"},
		{"", "abc", "abc"},
		{"/srv/st", "abc", "--state-dir /srv/st abc"},
		{"/a b/it's", "out dir", `--state-dir '/a b/it'\''s' 'out dir'`},
	} {
		if got := OpenStore(c.dir).CommandRef(c.ref); got != c.want {
			t.Errorf("OpenStore(%q).CommandRef(%q) = %s, want %s", c.dir, c.ref, got, c.want)
		}
	}
}
