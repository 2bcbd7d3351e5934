package main

import (
	"errors"
	"os/user"
	"strings"
	"testing"
)

// fixtureUsers is a user database where "bob" (uid 1000, gid 1000) and
// group "staff" (50) are well formed, and "mallory", uid 1001 and group
// "broken" carry ids that are not numbers, as a damaged passwd or a
// misbehaving NSS module can give.
func fixtureUsers() userDB {
	users := map[string]*user.User{
		"bob":     {Username: "bob", Uid: "1000", Gid: "1000"},
		"mallory": {Username: "mallory", Uid: "x1001", Gid: "1001"},
		"eve":     {Username: "eve", Uid: "1002", Gid: ""},
		"big":     {Username: "big", Uid: "4294967296", Gid: "1"},
		"neg":     {Username: "neg", Uid: "-1", Gid: "1"},
	}
	ids := map[string]*user.User{
		"1000": users["bob"],
		"1001": {Username: "odd", Uid: "1001", Gid: "abc"},
	}
	groups := map[string]*user.Group{
		"staff":  {Name: "staff", Gid: "50"},
		"broken": {Name: "broken", Gid: "0x10"},
	}
	notFound := errors.New("not found")
	return userDB{
		byID: func(id string) (*user.User, error) {
			if u, ok := ids[id]; ok {
				return u, nil
			}
			return nil, notFound
		},
		byName: func(n string) (*user.User, error) {
			if u, ok := users[n]; ok {
				return u, nil
			}
			return nil, notFound
		},
		group: func(n string) (*user.Group, error) {
			if g, ok := groups[n]; ok {
				return g, nil
			}
			return nil, notFound
		},
	}
}

func TestResolveUser(t *testing.T) {
	db := fixtureUsers()
	for _, c := range []struct {
		in       string
		uid, gid uint32
	}{
		{"bob", 1000, 1000},
		{"bob:staff", 1000, 50},
		{"bob:7", 1000, 7},
		{"1000", 1000, 1000},
		{"4242", 4242, 4242}, // not in the database: the number as both
		{"4242:staff", 4242, 50},
		{"0", 0, 0},
	} {
		uid, gid, err := resolveUser(c.in, db)
		if err != nil || uid != c.uid || gid != c.gid {
			t.Errorf("resolveUser(%q) = %d, %d, %v; want %d, %d", c.in, uid, gid, err, c.uid, c.gid)
		}
	}
}

// TestResolveUserBadID: an id the database gives that does not parse is an
// error naming the value; before, it became 0, root.
func TestResolveUserBadID(t *testing.T) {
	db := fixtureUsers()
	for _, c := range []struct{ in, bad string }{
		{"mallory", `"x1001"`},
		{"eve", `""`},
		{"big", `"4294967296"`},
		{"neg", `"-1"`},
		{"1001", `"abc"`},
		{"bob:broken", `"0x10"`},
	} {
		uid, gid, err := resolveUser(c.in, db)
		if err == nil {
			t.Errorf("resolveUser(%q) = %d, %d, nil; want an error", c.in, uid, gid)
			continue
		}
		if !strings.Contains(err.Error(), c.bad) {
			t.Errorf("resolveUser(%q): error %q does not name the value %s", c.in, err, c.bad)
		}
	}
	if _, _, err := resolveUser("nobody-here", db); err == nil || !strings.Contains(err.Error(), "no such user") {
		t.Errorf("unknown user: %v", err)
	}
}
