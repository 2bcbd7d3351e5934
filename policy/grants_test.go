package policy

import (
	"slices"
	"testing"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/posixacl"
)

func file(mode, uid, gid uint32, xs ...attest.Xattr) *attest.State {
	return &attest.State{Type: attest.File, Mode: mode, UID: uid, GID: gid, Xattrs: xs}
}

func dir(mode, uid, gid uint32, xs ...attest.Xattr) *attest.State {
	return &attest.State{Type: attest.Dir, Mode: mode, UID: uid, GID: gid, Xattrs: xs}
}

func acl(name string, es ...posixacl.Entry) attest.Xattr {
	return attest.Xattr{Name: name, Value: posixacl.Encode(es)}
}

// withNamed is a minimal ACL's entries plus extra, with mask m.
func withNamed(m uint16, extra ...posixacl.Entry) []posixacl.Entry {
	es := []posixacl.Entry{{Tag: posixacl.TagUserObj, Perm: 7}}
	es = append(es, extra...)
	return append(es, posixacl.Entry{Tag: posixacl.TagGroupObj, Perm: 5}, posixacl.Entry{Tag: posixacl.TagMask, Perm: m}, posixacl.Entry{Tag: posixacl.TagOther, Perm: 5})
}

func TestNewWriters(t *testing.T) {
	u1000 := posixacl.Entry{Tag: posixacl.TagUser, Perm: 7, ID: 1000}
	g50 := posixacl.Entry{Tag: posixacl.TagGroup, Perm: 6, ID: 50}
	root := dir(0o755, 0, 0)          // a root-owned workspace
	shared := dir(0o2775, 1000, 1000) // a umask 002 repository's directory
	cases := []struct {
		name          string
		old, new, dir *attest.State
		want          []Principal
	}{
		{"root agent's new file", nil, file(0o644, 0, 0), root, nil},
		{"root agent's new dir", nil, dir(0o755, 0, 0), root, nil},
		{"chmod 0777 dir", dir(0o755, 0, 0), dir(0o777, 0, 0), root, []Principal{{Group, 0}, {Everyone, 0}}},
		{"chmod 0666 file", file(0o755, 0, 0), file(0o666, 0, 0), root, []Principal{{Group, 0}, {Everyone, 0}}},
		{"already 0666", file(0o666, 0, 0), file(0o666, 0, 0), root, nil},
		{"chown 65534", dir(0o755, 0, 0), dir(0o755, 65534, 0), root, []Principal{{User, 65534}}},
		{"new file of uid 1000", nil, file(0o644, 1000, 0), root, []Principal{{User, 1000}}},
		{"owner's file in owner's dir", nil, file(0o644, 1000, 1000), dir(0o755, 1000, 1000), nil},
		{"umask 002 file", nil, file(0o664, 1000, 1000), shared, nil},
		{"umask 002 dir", nil, dir(0o775, 1000, 1000), shared, nil},
		{"umask 002 file, group does not write the dir", nil, file(0o664, 1000, 1000), dir(0o755, 1000, 1000), []Principal{{Group, 1000}}},
		{"group-writable file moved to another group", file(0o664, 1000, 1000), file(0o664, 1000, 50), shared, []Principal{{Group, 50}}},
		{"chgrp without g+w", file(0o644, 1000, 1000), file(0o644, 1000, 50), shared, nil},
		{"dir made g+w, group is the workspace's", dir(0o755, 0, 0), dir(0o775, 0, 0), root, []Principal{{Group, 0}}},
		{"access ACL u:1000:rwx", file(0o644, 0, 0), file(0o674, 0, 0, acl(posixacl.AccessXattr, withNamed(7, u1000)...)), root, []Principal{{User, 1000}}},
		{"access ACL masked to r-x", nil, file(0o654, 0, 0, acl(posixacl.AccessXattr, withNamed(5, u1000)...)), root, nil},
		{"access ACL group:50:rw-", nil, file(0o664, 0, 0, acl(posixacl.AccessXattr, withNamed(6, g50)...)), root, []Principal{{Group, 50}}},
		// With an ACL the group bits are the mask: group:: r-x stays r-x.
		{"named user already writes", nil, file(0o674, 0, 0, acl(posixacl.AccessXattr, withNamed(7, u1000)...)), dir(0o755, 0, 0, acl(posixacl.DefaultXattr, withNamed(7, u1000)...)), nil},
		{"default ACL u:1000:rwx", dir(0o755, 0, 0), dir(0o755, 0, 0, acl(posixacl.DefaultXattr, withNamed(7, u1000)...)), root, []Principal{{User, 1000}}},
		{"default ACL masked", nil, dir(0o755, 0, 0, acl(posixacl.DefaultXattr, withNamed(4, u1000)...)), root, nil},
		{"malformed ACL", nil, file(0o644, 0, 0, attest.Xattr{Name: posixacl.AccessXattr, Value: []byte{1}}), root, []Principal{{Everyone, 0}}},
		{"symlink", nil, &attest.State{Type: attest.Symlink, Mode: 0o777, UID: 1000, GID: 1000}, root, nil},
		{"sticky dropped", dir(0o1777, 0, 0), dir(0o777, 0, 0), root, []Principal{{Group, 0}, {Everyone, 0}}},
		{"sticky kept", dir(0o1777, 0, 0), dir(0o1777, 0, 0), root, nil},
		{"0666 file in a sticky 1777 dir", nil, file(0o666, 0, 0), dir(0o1777, 0, 0), []Principal{{Group, 0}, {Everyone, 0}}},
		{"0666 file in a 0777 dir", nil, file(0o666, 0, 0), dir(0o777, 0, 0), nil},
		{"setgid set on a dir", dir(0o755, 1000, 50), dir(0o2755, 1000, 50), dir(0o755, 1000, 1000), []Principal{{Group, 50}}},
		{"setgid inherited", nil, dir(0o2755, 1000, 50), dir(0o2755, 1000, 50), nil},
		{"group file in a setgid dir", nil, file(0o664, 1000, 50), dir(0o2755, 1000, 50), nil},
		{"workspace root chmod 0777", dir(0o755, 0, 0), dir(0o777, 0, 0), nil, []Principal{{Group, 0}, {Everyone, 0}}},
		{"workspace root touched", dir(0o775, 1000, 1000), dir(0o775, 1000, 1000), nil, nil},
		{"deleted", file(0o666, 1000, 0), nil, root, nil},
	}
	for _, c := range cases {
		got := NewWriters(c.old, c.new, c.dir)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: NewWriters = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestGrantViolation(t *testing.T) {
	r := &Rules{}
	bad := file(0o666, 0, 0)
	if got := r.GrantViolation("deploy/prod.sh", file(0o755, 0, 0), bad, dir(0o755, 0, 0)); got != RuleGrantsWrite {
		t.Errorf("GrantViolation = %q, want %q", got, RuleGrantsWrite)
	}
	a, err := Compile("deploy/**")
	if err != nil {
		t.Fatal(err)
	}
	r.Allow = []*Glob{a}
	if got := r.GrantViolation("deploy/prod.sh", file(0o755, 0, 0), bad, dir(0o755, 0, 0)); got != "" {
		t.Errorf("allowed: GrantViolation = %q", got)
	}
}
