package layerseal

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/policy"
)

// LoadConfig reads the session's configuration: file when given, otherwise
// policy.FileName in the workspace root when it exists (nil, nil when it
// does not). The workspace's configuration file is protected by every
// session whether or not it exists (see Run), so an agent cannot write the
// next session's policy.
func LoadConfig(workspace, file string) (*policy.Config, error) {
	inWorkspace := file == ""
	if inWorkspace {
		file = filepath.Join(workspace, policy.FileName)
	}
	f, err := os.OpenFile(file, os.O_RDONLY|noFollowIf(inWorkspace), 0)
	if inWorkspace && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR)) {
		return nil, nil // no config; a missing workspace is reported by Run
	}
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("config %q: %w", file, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("config %q is not a regular file", file)
	}
	b, err := io.ReadAll(io.LimitReader(f, policy.MaxConfigSize+1))
	if err != nil {
		return nil, fmt.Errorf("config %q: %w", file, err)
	}
	c, err := policy.Parse(file, b)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// PolicyFrom is the launch-record policy of a configuration and the run's
// allows: the config's values where base leaves them zero.
func PolicyFrom(c *policy.Config, allow []*policy.Glob, base attest.Policy) attest.Policy {
	p := base
	if c != nil {
		p.Exclude = policy.Texts(c.Exclude)
		p.Protect = policy.Texts(c.Protected)
		p.ConfigDigest = c.Digest
		p.CheckpointEvery = c.CheckpointEvery
		if c.Apply == policy.ApplyStage || c.Apply == policy.ApplyAlways {
			p.Apply = c.Apply
		}
		for _, v := range []struct {
			dst *int64
			src int64
		}{{&p.DigestCap, c.DigestCap}, {&p.MaxDirEntries, c.MaxEntriesPerDir}, {&p.MaxEntries, c.Entries}, {&p.MaxUpper, c.MaxUpper}, {&p.MinFree, c.MinFree}} {
			if *v.dst == 0 {
				*v.dst = v.src
			}
		}
		if p.TimeBudget == 0 {
			p.TimeBudget = c.Time
		}
	}
	p.Allow = policy.Texts(allow)
	return p
}

// rulesOf compiles the globs a launch record's policy holds.
func rulesOf(p attest.Policy) (*policy.Rules, error) {
	var r policy.Rules
	var err error
	for _, x := range []struct {
		dst *[]*policy.Glob
		src []attest.Path
	}{{&r.Exclude, p.Exclude}, {&r.Protected, p.Protect}, {&r.Allow, p.Allow}} {
		texts := make([]string, len(x.src))
		for i, t := range x.src {
			texts[i] = string(t)
		}
		if *x.dst, err = policy.CompileAll(texts); err != nil {
			return nil, fmt.Errorf("policy: %w", err)
		}
	}
	return &r, nil
}

// noFollowIf refuses a symlink as the workspace's config file: the file
// must be the workspace's own.
func noFollowIf(b bool) int {
	if b {
		return unix.O_NOFOLLOW
	}
	return 0
}
