package attest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Sandbox is what confined the agent beyond its workspace overlay, as found
// in force when it started. It is part of the launch record.
//
// Its JSON members, all present but where said, in this order:
//
//	terminal       "pty" (a new pseudo-terminal, relayed) or "streams" (the
//	               caller's streams, no terminal)
//	new_session    bool: the agent leads a session of its own
//	preserved_fds  decimal string: descriptors beyond 0, 1, 2 passed on
//	namespaces     array of the namespaces made new, sorted: "cgroup", "ipc",
//	               "mount", "net", "pid", "uts"
//	network        "none" (a loopback-only namespace), "proxy" (a
//	               loopback-only namespace whose only way out is the
//	               supervisor's proxy, see allow_net and Egress) or "host"
//	cgroup         the agent's cgroup v2 path, "" when it has none
//	cgroup_kill    "cgroup.kill", "freeze" (freeze, then kill each) or ""
//	memory_max     decimal string, bytes; "0" for no limit
//	pids_max       decimal string; "0" for no limit (processes and threads;
//	               layerseal sets 4096 unless told otherwise)
//	read_only_host bool: the host's filesystem is read-only to the agent but
//	               for the workspace, a private /tmp and writable
//	writable       array of Bytes text: host paths left writable (not attested)
//	seccomp        "default" or "unconfined"
//	seccomp_sha256 lowercase hex SHA-256 of the loaded filter program (its
//	               struct sock_filter array as the kernel took it), "" when none
//	scoped         array of the Landlock scopes the agent was confined by,
//	               sorted: "abstract_unix_socket" (it could not connect or
//	               send to an abstract unix socket made outside its own
//	               processes) and "signal" (nor signal a process outside);
//	               omitted when there are none (the kernel offers no scoping:
//	               Landlock off, or before Linux 6.12; and every record made
//	               before layerseal scoped), a limit of the kernel the launch
//	               record states, not a missing restriction
//	missing        array of strings: restrictions asked for that the kernel or
//	               host could not give, each a short sentence; every one of
//	               them makes the statement incomplete (code "sandbox")
//	allow_net      array of strings: the destinations the proxy allowed,
//	               each HOST[:PORT] as given ("*.example.com" for its
//	               subdomains, no port for 80 and 443), sorted and unique;
//	               only with network "proxy", omitted when empty
//	cgroup_v1      object: for each limit held by a cgroup v1 hierarchy
//	               rather than the v2 one (a hybrid host's), its controller
//	               ("memory": memory.limit_in_bytes, and
//	               memory.memsw.limit_in_bytes where the kernel accounts swap;
//	               "pids": pids.max) and the agent's cgroup path in that
//	               controller's hierarchy; omitted when there is none (as in
//	               every record made before it existed)
//	view           "minimal" (a root built of the host's programs and
//	               libraries, read-only, with the secrets of /etc masked, and
//	               what read_only and writable name) or "host" (the host's
//	               whole filesystem, read-only but for the workspace, a
//	               private /tmp and writable); omitted in records made before
//	               layerseal had views, which had the host view
//	read_only      array of Bytes text: the host paths bound read-only at
//	               their own paths in the minimal view, the system's
//	               directories and those the operator named, in the order
//	               bound; omitted when there are none (the host view)
type Sandbox struct {
	Terminal      string
	NewSession    bool
	PreservedFDs  int
	Namespaces    []string
	Network       string
	Cgroup        string
	CgroupKill    string
	MemoryMax     int64
	PidsMax       int64
	ReadOnlyHost  bool
	Writable      []string
	Seccomp       string
	SeccompSHA256 []byte
	Scoped        []string
	Missing       []string
	AllowNet      []string // with Network "proxy": HOST[:PORT] each, sorted
	// CgroupV1 names, by controller ("memory", "pids"), the agent's
	// cgroup v1 path that held MemoryMax or PidsMax.
	CgroupV1 map[string]string
	View     string
	ReadOnly []string
}

type sandboxJSON struct {
	Terminal      string           `json:"terminal"`
	NewSession    bool             `json:"new_session"`
	PreservedFDs  int              `json:"preserved_fds,string"`
	Namespaces    []string         `json:"namespaces"`
	Network       string           `json:"network"`
	Cgroup        Bytes            `json:"cgroup"`
	CgroupKill    string           `json:"cgroup_kill"`
	MemoryMax     int64            `json:"memory_max,string"`
	PidsMax       int64            `json:"pids_max,string"`
	ReadOnlyHost  bool             `json:"read_only_host"`
	Writable      []Bytes          `json:"writable"`
	Seccomp       string           `json:"seccomp"`
	SeccompSHA256 string           `json:"seccomp_sha256"`
	Scoped        []string         `json:"scoped,omitempty"`
	Missing       []string         `json:"missing"`
	AllowNet      []string         `json:"allow_net,omitempty"`
	CgroupV1      map[string]Bytes `json:"cgroup_v1,omitempty"`
	View          string           `json:"view,omitempty"`
	ReadOnly      []Bytes          `json:"read_only,omitempty"`
}

func (s *Sandbox) toJSON() sandboxJSON {
	return sandboxJSON{
		Terminal: s.Terminal, NewSession: s.NewSession, PreservedFDs: s.PreservedFDs,
		Namespaces: nonNil(s.Namespaces), Network: s.Network, Cgroup: Bytes(s.Cgroup), CgroupKill: s.CgroupKill,
		MemoryMax: s.MemoryMax, PidsMax: s.PidsMax, ReadOnlyHost: s.ReadOnlyHost,
		Writable: toBytes(s.Writable), Seccomp: s.Seccomp, SeccompSHA256: hexOrEmpty(s.SeccompSHA256),
		Scoped: s.Scoped, Missing: nonNil(s.Missing), AllowNet: s.AllowNet, CgroupV1: bytesMap(s.CgroupV1),
		View: s.View, ReadOnly: toBytes(s.ReadOnly),
	}
}

func (j *sandboxJSON) fromJSON() (Sandbox, error) {
	s := Sandbox{
		Terminal: j.Terminal, NewSession: j.NewSession, PreservedFDs: j.PreservedFDs,
		Namespaces: nilIfEmpty(j.Namespaces), Network: j.Network, Cgroup: string(j.Cgroup), CgroupKill: j.CgroupKill,
		MemoryMax: j.MemoryMax, PidsMax: j.PidsMax, ReadOnlyHost: j.ReadOnlyHost,
		Writable: fromBytes(j.Writable), Seccomp: j.Seccomp, Scoped: nilIfEmpty(j.Scoped), Missing: nilIfEmpty(j.Missing),
		AllowNet: nilIfEmpty(j.AllowNet), View: j.View, ReadOnly: nilIfEmpty(fromBytes(j.ReadOnly)),
	}
	for ctl, p := range j.CgroupV1 {
		if s.CgroupV1 == nil {
			s.CgroupV1 = map[string]string{}
		}
		s.CgroupV1[ctl] = string(p)
	}
	if j.SeccompSHA256 != "" {
		var err error
		if s.SeccompSHA256, err = parseHex("seccomp digest", j.SeccompSHA256); err != nil {
			return Sandbox{}, err
		}
	}
	return s, nil
}

func bytesMap(m map[string]string) map[string]Bytes {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]Bytes, len(m))
	for k, v := range m {
		out[k] = Bytes(v)
	}
	return out
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

var (
	knownTerminals  = []string{"pty", "streams"}
	knownNamespaces = []string{"cgroup", "ipc", "mount", "net", "pid", "uts"}
	knownNetworks   = []string{"host", "none", "proxy"}
	knownKills      = []string{"", "cgroup.kill", "freeze"}
	knownSeccomp    = []string{"default", "unconfined"}
	knownScopes     = []string{"abstract_unix_socket", "signal"}
	knownViews      = []string{"", "host", "minimal"}
)

// validate checks the values of s.
func (s *Sandbox) validate() error {
	oneOf := func(what, v string, known []string) error {
		if !slices.Contains(known, v) {
			return fmt.Errorf("sandbox %s %q: want one of %q", what, v, known)
		}
		return nil
	}
	if err := errors.Join(oneOf("terminal", s.Terminal, knownTerminals), oneOf("network", s.Network, knownNetworks),
		oneOf("cgroup kill", s.CgroupKill, knownKills), oneOf("seccomp", s.Seccomp, knownSeccomp)); err != nil {
		return err
	}
	if !slices.IsSorted(s.Namespaces) || len(slices.Compact(slices.Clone(s.Namespaces))) != len(s.Namespaces) {
		return fmt.Errorf("sandbox namespaces %q: not sorted and unique", s.Namespaces)
	}
	for _, n := range s.Namespaces {
		if err := oneOf("namespace", n, knownNamespaces); err != nil {
			return err
		}
	}
	if !slices.IsSorted(s.Scoped) || len(slices.Compact(slices.Clone(s.Scoped))) != len(s.Scoped) {
		return fmt.Errorf("sandbox scopes %q: not sorted and unique", s.Scoped)
	}
	for _, n := range s.Scoped {
		if err := oneOf("scope", n, knownScopes); err != nil {
			return err
		}
	}
	if s.PreservedFDs < 0 || s.MemoryMax < 0 || s.PidsMax < 0 {
		return fmt.Errorf("sandbox has a negative count (preserved fds %d, memory max %d, pids max %d)",
			s.PreservedFDs, s.MemoryMax, s.PidsMax)
	}
	if s.SeccompSHA256 != nil && len(s.SeccompSHA256) != 32 {
		return fmt.Errorf("sandbox seccomp digest of %d bytes", len(s.SeccompSHA256))
	}
	if (s.Seccomp == "default") != (s.SeccompSHA256 != nil) {
		return fmt.Errorf("sandbox seccomp %q with digest %x", s.Seccomp, s.SeccompSHA256)
	}
	for _, p := range append([]string{s.Cgroup}, s.Missing...) {
		if err := validText("sandbox value", p); err != nil {
			return err
		}
	}
	if len(s.AllowNet) > 0 && s.Network != "proxy" {
		return fmt.Errorf("sandbox allows %q with network %q, not \"proxy\"", s.AllowNet, s.Network)
	}
	if !slices.IsSorted(s.AllowNet) || len(slices.Compact(slices.Clone(s.AllowNet))) != len(s.AllowNet) {
		return fmt.Errorf("sandbox allow_net %q: not sorted and unique", s.AllowNet)
	}
	for _, a := range s.AllowNet {
		if a == "" || strings.ContainsFunc(a, func(r rune) bool { return r <= 0x20 || r >= 0x7F }) {
			return fmt.Errorf("sandbox allow_net %q: empty, or not printable ASCII", a)
		}
	}
	for _, p := range s.Writable {
		if p == "" || p[0] != '/' || strings.IndexByte(p, 0) >= 0 {
			return fmt.Errorf("sandbox writable path %q: not absolute, or holds NUL", p)
		}
	}
	for ctl, p := range s.CgroupV1 {
		if limit := map[string]int64{"memory": s.MemoryMax, "pids": s.PidsMax}[ctl]; limit == 0 {
			return fmt.Errorf("sandbox cgroup_v1 %q: not a limit the record holds (want \"memory\" or \"pids\", with its limit)", ctl)
		}
		if p == "" || p[0] != '/' {
			return fmt.Errorf("sandbox cgroup_v1 %s path %q: not absolute", ctl, p)
		}
		if err := validText("sandbox cgroup_v1 path", p); err != nil {
			return err
		}
	}
	if err := oneOf("view", s.View, knownViews); err != nil {
		return err
	}
	for _, p := range s.ReadOnly {
		if p == "" || p[0] != '/' || strings.IndexByte(p, 0) >= 0 {
			return fmt.Errorf("sandbox read-only path %q: not absolute, or holds NUL", p)
		}
	}
	return nil
}

// HostView reports whether the agent saw the host's whole filesystem: the
// host view, named or (in a record made before views) implied.
func (s *Sandbox) HostView() bool { return s.View != "minimal" }

// Reasons are the incomplete reasons a statement carries for restrictions
// the sandbox could not give (code Sandbox, one per Missing entry).
func (s *Sandbox) Reasons() []Reason {
	var out []Reason
	for _, m := range s.Missing {
		out = append(out, Reason{Code: SandboxWeakened, Detail: m})
	}
	return out
}
