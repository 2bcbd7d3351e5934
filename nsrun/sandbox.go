package nsrun

import (
	"fmt"
	"path/filepath"
	"strings"
)

// Sandbox is what the caller asks of the agent's confinement beyond the
// workspace overlay. The zero value is the strict default: a loopback-only
// network, the minimal view, and everything else as closed as the kernel
// allows.
type Sandbox struct {
	// Network is "none" (a new network namespace with only loopback),
	// "proxy" (the same, with a listener on 127.0.0.1:ProxyPort there whose
	// connections the supervisor serves: Run.ProxyListener) or "host" (the
	// host's network); "" means "none".
	Network string
	// Writable are host paths (absolute, clean) the agent may write besides
	// the workspace and its private /tmp. Writes there are not attested.
	Writable []string
	// PreserveFDs passes descriptors 3 .. 3+PreserveFDs-1 of the caller on to
	// the agent; every other descriptor beyond 0, 1 and 2 is closed.
	PreserveFDs int
	// MemoryMax and PidsMax limit the agent's cgroup (memory.max in bytes,
	// pids.max), in the cgroup v2 hierarchy or, where it lacks the
	// controller, in a cgroup v1 one. MemoryMax 0 means no limit; PidsMax
	// 0 means DefaultPidsMax, and NoPidsLimit none.
	MemoryMax, PidsMax int64
	// Seccomp is "default" (the built-in filter) or "unconfined"; "" means
	// "default".
	Seccomp string
	// View is "minimal" (a root built of the host's programs and libraries,
	// read-only, and what is named: see [SystemDirs]) or "host" (the whole
	// host, read-only); "" means "minimal".
	View string
	// ReadOnly are host paths (absolute, clean) the agent may read at their
	// own paths besides what its view shows.
	ReadOnly []string
}

// withDefaults returns s with its empty choices made explicit.
func (s Sandbox) withDefaults() Sandbox {
	if s.Network == "" {
		s.Network = "none"
	}
	if s.Seccomp == "" {
		s.Seccomp = "default"
	}
	if s.PidsMax == 0 {
		s.PidsMax = DefaultPidsMax
	}
	if s.View == "" {
		s.View = ViewMinimal
	}
	return s
}

// Validate checks s without touching the system.
func (s Sandbox) Validate() error {
	s = s.withDefaults()
	if s.Network != "host" && s.Network != "none" && s.Network != "proxy" {
		return fmt.Errorf("network %q: want \"none\", \"proxy\" or \"host\"", s.Network)
	}
	if s.Seccomp != "default" && s.Seccomp != "unconfined" {
		return fmt.Errorf("seccomp %q: want \"default\" or \"unconfined\"", s.Seccomp)
	}
	for _, p := range s.Writable {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.IndexByte(p, 0) >= 0 {
			return fmt.Errorf("writable path %q: not an absolute, clean path", p)
		}
		if p == "/" {
			return fmt.Errorf("writable path %q: the whole host cannot be writable", p)
		}
	}
	if err := s.validateView(); err != nil {
		return err
	}
	if s.PreserveFDs < 0 || s.PreserveFDs > 1<<16 {
		return fmt.Errorf("preserved descriptors %d: want 0 to 65536", s.PreserveFDs)
	}
	if s.MemoryMax < 0 || s.PidsMax < NoPidsLimit {
		return fmt.Errorf("limits must not be negative (memory %d, pids %d)", s.MemoryMax, s.PidsMax)
	}
	return nil
}
