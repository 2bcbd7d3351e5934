package main

import (
	"fmt"
	"os/user"
	"strconv"
	"strings"
)

// userDB is the user and group database lookupUser reads: os/user in the
// program, a fixture in tests.
type userDB struct {
	byID   func(uid string) (*user.User, error)
	byName func(name string) (*user.User, error)
	group  func(name string) (*user.Group, error)
}

var systemUsers = userDB{byID: user.LookupId, byName: user.Lookup, group: user.LookupGroup}

// lookupUser resolves USER[:GROUP], names or numbers; a user's primary
// group is the default.
func lookupUser(s string) (uid, gid uint32, err error) {
	return resolveUser(s, systemUsers)
}

// resolveUser is lookupUser over db. A uid or gid the database gives that
// is not a decimal number below 2^32 is an error naming it, never 0.
func resolveUser(s string, db userDB) (uid, gid uint32, err error) {
	name, group, hasGroup := strings.Cut(s, ":")
	num := func(v string) (uint32, bool) {
		n, err := strconv.ParseUint(v, 10, 32)
		return uint32(n), err == nil
	}
	id := func(what, v string) (uint32, error) {
		n, ok := num(v)
		if !ok {
			return 0, fmt.Errorf("--user %q: the %s is %q, not a number", s, what, v)
		}
		return n, nil
	}
	if n, ok := num(name); ok {
		uid, gid = n, n
		if u, err := db.byID(name); err == nil {
			if gid, err = id("gid of uid "+name, u.Gid); err != nil {
				return 0, 0, err
			}
		}
	} else {
		u, err := db.byName(name)
		if err != nil {
			return 0, 0, fmt.Errorf("--user %q: no such user", s)
		}
		if uid, err = id("uid of user "+strconv.Quote(name), u.Uid); err != nil {
			return 0, 0, err
		}
		if gid, err = id("gid of user "+strconv.Quote(name), u.Gid); err != nil {
			return 0, 0, err
		}
	}
	if hasGroup {
		if n, ok := num(group); ok {
			gid = n
		} else {
			g, err := db.group(group)
			if err != nil {
				return 0, 0, fmt.Errorf("--user %q: no such group %q", s, group)
			}
			if gid, err = id("gid of group "+strconv.Quote(group), g.Gid); err != nil {
				return 0, 0, err
			}
		}
	}
	return uid, gid, nil
}
