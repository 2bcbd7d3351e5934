package attest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// LaunchRecord is what layerseal pinned before the agent started. It is
// signed with SignLaunch as an in-toto statement of predicate type
// LaunchPredicateType whose one subject is named "launch:" + SessionID with
// the SHA-256 of the canonical predicate JSON as its digest.
//
// The predicate's JSON members, all present, in this order:
//
//	session_id    32 lowercase hex digits
//	key_id        key ID of the signing key, ALG:HEX (see PublicKey)
//	workspace     host path, text form of Bytes
//	lower         {"dev","ino","mount_id": decimal strings, "mount_id_known": bool}
//	overlay       {"options","missing": arrays of Bytes text}
//	kernel        {"release": string, "features": object of bools, keys sorted}
//	agent         the OCI runtime-spec process object, with its own member names
//	sandbox       Sandbox's members (see Sandbox)
//	policy        {"digest_cap","max_entries","max_dir_entries": decimal strings,
//	               "time_budget": Go duration string, "exclude","protect": arrays of paths,
//	               "allow": array of paths, "config_sha256": lowercase hex (omitted
//	               when no config file was read), "checkpoint_every": Go duration
//	               string, "apply": "auto", "stage" or "always", then, each
//	               omitted when 0 (and in every record made before they existed):
//	               "max_upper": decimal string, the most bytes the session's
//	               upper layer may take on disk before the agent is stopped;
//	               "min_free": decimal string, the bytes of free space the
//	               state dir's filesystem keeps: the agent is stopped when less
//	               is left}
//	tool_version  string
//	started       RFC 3339 UTC time with nanoseconds, trailing zeros dropped
//
// and, only when it is not empty (every record made before it existed
// lacks it):
//
//	env_not_recorded  array of the names of the agent's environment
//	              variables whose values the record leaves out, sorted, each
//	              once: the agent got a value under each name, but agent.env
//	              holds no entry of that name (a value taken from the
//	              caller's environment, or a name that looks like a
//	              secret's; see layerseal.LooksSecret)
type LaunchRecord struct {
	SessionID   string // NewSessionID
	KeyID       string // set by SignLaunch
	Workspace   Bytes  // the workspace's host path
	Lower       LowerIdentity
	Overlay     OverlayOptions
	Kernel      Kernel
	Agent       specs.Process // argv, env, cwd, user, capabilities, rlimits, no_new_privileges
	Sandbox     Sandbox       // what confined the agent beyond the overlay
	Policy      Policy
	ToolVersion string
	Started     time.Time
	// EnvNotRecorded names the agent's environment variables whose values
	// Agent.Env leaves out, sorted and unique.
	EnvNotRecorded []string
}

// LowerIdentity identifies the lower layer (the real workspace directory).
type LowerIdentity struct {
	Dev, Ino uint64
	// MountID is the statx mount ID; 0 with MountIDKnown false when the
	// kernel cannot report it.
	MountID      uint64
	MountIDKnown bool
}

// OverlayOptions are the overlay mount's options.
type OverlayOptions struct {
	Options []string // exactly as mounted (mountinfo), in order
	Missing []string // pinned options the kernel refused or did not show
}

// Kernel describes the kernel the session ran on.
type Kernel struct {
	Release  string          // uname release
	Features map[string]bool // features found by trying, by name
}

// Policy is the session's declared scope and limits.
type Policy struct {
	DigestCap     int64         // largest regular file hashed, in bytes
	MaxEntries    int64         // entry budget of the walk
	MaxDirEntries int64         // per-directory entry limit
	TimeBudget    time.Duration // time budget of the walk
	Exclude       []Path        // workspace paths declared out of scope
	Protect       []Path        // workspace paths the agent may not change
	// Allow are the run's permissions to change protected paths (globs).
	Allow []Path
	// ConfigDigest is the SHA-256 of the configuration file's bytes; nil
	// when none was read.
	ConfigDigest []byte
	// CheckpointEvery is the checkpoint interval; 0 means none.
	CheckpointEvery time.Duration
	// Apply is "stage" (keep the change set for review), "always" (apply
	// whatever the run's outcome) or empty: apply when the agent is done,
	// unless the run had violations, a non-zero exit or a signal ("auto"
	// in JSON; decoded as empty).
	Apply string
	// MaxUpper is the most bytes the upper layer may take on disk; the
	// agent is stopped past it. 0 means no limit.
	MaxUpper int64
	// MinFree is the free space, in bytes, the state dir's filesystem
	// keeps: the agent is stopped when less is left. 0 means none.
	MinFree int64
}

// NewSessionID returns a random 128-bit session ID in lowercase hex.
func NewSessionID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

type launchJSON struct {
	SessionID   string        `json:"session_id"`
	KeyID       string        `json:"key_id"`
	Workspace   Bytes         `json:"workspace"`
	Lower       lowerJSON     `json:"lower"`
	Overlay     overlayJSON   `json:"overlay"`
	Kernel      kernelJSON    `json:"kernel"`
	Agent       specs.Process `json:"agent"`
	Sandbox     sandboxJSON   `json:"sandbox"`
	Policy      policyJSON    `json:"policy"`
	ToolVersion string        `json:"tool_version"`
	Started     string        `json:"started"`

	EnvNotRecorded []string `json:"env_not_recorded,omitempty"`
}

type lowerJSON struct {
	Dev          uint64 `json:"dev,string"`
	Ino          uint64 `json:"ino,string"`
	MountID      uint64 `json:"mount_id,string"`
	MountIDKnown bool   `json:"mount_id_known"`
}

type overlayJSON struct {
	Options []Bytes `json:"options"`
	Missing []Bytes `json:"missing"`
}

type kernelJSON struct {
	Release  string          `json:"release"`
	Features map[string]bool `json:"features"`
}

type policyJSON struct {
	DigestCap       int64  `json:"digest_cap,string"`
	MaxEntries      int64  `json:"max_entries,string"`
	MaxDirEntries   int64  `json:"max_dir_entries,string"`
	TimeBudget      string `json:"time_budget"`
	Exclude         []Path `json:"exclude"`
	Protect         []Path `json:"protect"`
	Allow           []Path `json:"allow"`
	ConfigDigest    string `json:"config_sha256,omitempty"`
	CheckpointEvery string `json:"checkpoint_every"`
	Apply           string `json:"apply"`
	MaxUpper        int64  `json:"max_upper,omitzero,string"`
	MinFree         int64  `json:"min_free,omitzero,string"`
}

func toBytes(ss []string) []Bytes {
	out := make([]Bytes, len(ss))
	for i, s := range ss {
		out[i] = Bytes(s)
	}
	return out
}

func fromBytes(bs []Bytes) []string {
	if len(bs) == 0 {
		return nil
	}
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = string(b)
	}
	return out
}

func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}

func (l *LaunchRecord) toJSON() *launchJSON {
	return &launchJSON{
		SessionID:   l.SessionID,
		KeyID:       l.KeyID,
		Workspace:   l.Workspace,
		Lower:       lowerJSON(l.Lower),
		Overlay:     overlayJSON{Options: toBytes(l.Overlay.Options), Missing: toBytes(l.Overlay.Missing)},
		Kernel:      kernelJSON{Release: l.Kernel.Release, Features: l.Kernel.Features},
		Agent:       l.Agent,
		Sandbox:     l.Sandbox.toJSON(),
		Policy:      l.Policy.toJSON(),
		ToolVersion: l.ToolVersion,
		Started:     formatTime(l.Started),

		EnvNotRecorded: l.EnvNotRecorded,
	}
}

// fromJSON converts a decoded predicate, refusing values with no model form.
func (j *launchJSON) fromJSON() (*LaunchRecord, error) {
	started, err := parseTime("started", j.Started)
	if err != nil {
		return nil, err
	}
	budget, err := time.ParseDuration(j.Policy.TimeBudget)
	if err != nil || budget.String() != j.Policy.TimeBudget {
		return nil, fmt.Errorf("time budget %q is not a Go duration string", j.Policy.TimeBudget)
	}
	policy, err := j.Policy.fromJSON(budget)
	if err != nil {
		return nil, err
	}
	sandbox, err := j.Sandbox.fromJSON()
	if err != nil {
		return nil, err
	}
	features := j.Kernel.Features
	if len(features) == 0 {
		features = nil
	}
	return &LaunchRecord{
		SessionID:   j.SessionID,
		KeyID:       j.KeyID,
		Workspace:   j.Workspace,
		Lower:       LowerIdentity(j.Lower),
		Overlay:     OverlayOptions{Options: fromBytes(j.Overlay.Options), Missing: fromBytes(j.Overlay.Missing)},
		Kernel:      Kernel{Release: j.Kernel.Release, Features: features},
		Agent:       j.Agent,
		Sandbox:     sandbox,
		Policy:      policy,
		ToolVersion: j.ToolVersion,
		Started:     started,

		EnvNotRecorded: nilIfEmpty(j.EnvNotRecorded),
	}, nil
}

// validText refuses strings that are not UTF-8 or hold control characters.
func validText(what, s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%s %q is not valid UTF-8", what, s)
	}
	if strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7F || hidden(r) }) {
		return fmt.Errorf("%s %q holds control or invisible characters", what, s)
	}
	return nil
}

// validEnvNotRecorded checks the names whose values the record leaves
// out: sorted, unique, each a name (not empty, no "=") in text form, and
// none with an entry in env, so that no value stands beside its name.
func validEnvNotRecorded(names, env []string) error {
	if !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) {
		return fmt.Errorf("env_not_recorded %q: not sorted and unique", names)
	}
	for _, n := range names {
		if n == "" || strings.Contains(n, "=") {
			return fmt.Errorf("env_not_recorded name %q: empty or holds \"=\"", n)
		}
		if err := validText("env_not_recorded name", n); err != nil {
			return err
		}
	}
	for _, kv := range env {
		if name, _, _ := strings.Cut(kv, "="); slices.Contains(names, name) {
			return fmt.Errorf("agent env entry %q is named in env_not_recorded", name)
		}
	}
	return nil
}

func validPaths(what string, ps []Path) error {
	for _, p := range ps {
		if err := p.Valid(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	return nil
}

// validate checks the values of l.
func (l *LaunchRecord) validate() error {
	if err := checkSessionID(l.SessionID); err != nil {
		return err
	}
	if err := checkKeyID(l.KeyID); err != nil {
		return err
	}
	if l.Workspace == "" || strings.IndexByte(string(l.Workspace), 0) >= 0 {
		return fmt.Errorf("workspace %q is empty or holds NUL", string(l.Workspace))
	}
	if !l.Lower.MountIDKnown && l.Lower.MountID != 0 {
		return fmt.Errorf("lower mount id %d given but marked unknown", l.Lower.MountID)
	}
	for _, o := range append(append([]string(nil), l.Overlay.Options...), l.Overlay.Missing...) {
		if o == "" || strings.IndexByte(o, 0) >= 0 {
			return fmt.Errorf("overlay option %q is empty or holds NUL", o)
		}
	}
	if err := validText("kernel release", l.Kernel.Release); err != nil {
		return err
	}
	for name := range l.Kernel.Features {
		if name == "" {
			return errors.New("kernel feature with empty name")
		}
		if err := validText("kernel feature", name); err != nil {
			return err
		}
	}
	if len(l.Agent.Args) == 0 {
		return errors.New("agent has no argv")
	}
	if err := validEnvNotRecorded(l.EnvNotRecorded, l.Agent.Env); err != nil {
		return err
	}
	if err := l.Sandbox.validate(); err != nil {
		return err
	}
	p := l.Policy
	if p.DigestCap < 0 || p.MaxEntries < 0 || p.MaxDirEntries < 0 || p.TimeBudget < 0 {
		return fmt.Errorf("policy has a negative limit (digest cap %d, max entries %d, max dir entries %d, time budget %s)",
			p.DigestCap, p.MaxEntries, p.MaxDirEntries, p.TimeBudget)
	}
	if err := validPaths("policy exclude", p.Exclude); err != nil {
		return err
	}
	if err := validPaths("policy protect", p.Protect); err != nil {
		return err
	}
	if err := validPaths("policy allow", p.Allow); err != nil {
		return err
	}
	if p.ConfigDigest != nil && len(p.ConfigDigest) != 32 {
		return fmt.Errorf("policy config digest of %d bytes", len(p.ConfigDigest))
	}
	if p.MaxUpper < 0 || p.MinFree < 0 {
		return fmt.Errorf("policy has a negative upper layer limit (max upper %d, min free %d)", p.MaxUpper, p.MinFree)
	}
	if p.CheckpointEvery < 0 {
		return fmt.Errorf("policy checkpoint interval %s is negative", p.CheckpointEvery)
	}
	if p.Apply != "" && p.Apply != "auto" && p.Apply != "stage" && p.Apply != "always" {
		return fmt.Errorf("policy apply mode %q: want \"auto\", \"stage\" or \"always\"", p.Apply)
	}
	if err := validText("tool version", l.ToolVersion); err != nil {
		return err
	}
	return checkTime("started", l.Started)
}

func (p Policy) toJSON() policyJSON {
	apply := p.Apply
	if apply == "" {
		apply = "auto"
	}
	return policyJSON{
		DigestCap: p.DigestCap, MaxEntries: p.MaxEntries, MaxDirEntries: p.MaxDirEntries,
		TimeBudget: p.TimeBudget.String(), Exclude: p.Exclude, Protect: p.Protect, Allow: p.Allow,
		ConfigDigest: hexOrEmpty(p.ConfigDigest), CheckpointEvery: p.CheckpointEvery.String(), Apply: apply,
		MaxUpper: p.MaxUpper, MinFree: p.MinFree,
	}
}

func (j policyJSON) fromJSON(budget time.Duration) (Policy, error) {
	every, err := time.ParseDuration(j.CheckpointEvery)
	if err != nil || every.String() != j.CheckpointEvery {
		return Policy{}, fmt.Errorf("checkpoint interval %q is not a Go duration string", j.CheckpointEvery)
	}
	p := Policy{
		DigestCap: j.DigestCap, MaxEntries: j.MaxEntries, MaxDirEntries: j.MaxDirEntries, TimeBudget: budget,
		Exclude: nilIfEmpty(j.Exclude), Protect: nilIfEmpty(j.Protect), Allow: nilIfEmpty(j.Allow),
		CheckpointEvery: every, Apply: j.Apply, MaxUpper: j.MaxUpper, MinFree: j.MinFree,
	}
	if p.Apply == "auto" {
		p.Apply = ""
	}
	if j.ConfigDigest != "" {
		if p.ConfigDigest, err = parseHex("config digest", j.ConfigDigest); err != nil {
			return Policy{}, err
		}
	}
	return p, nil
}
