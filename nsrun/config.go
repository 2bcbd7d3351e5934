// Package nsrun launches the agent inside new mount, PID, IPC, UTS and cgroup
// namespaces (and a network namespace when asked), in which its workspace is
// an overlay, in a session, a cgroup v2 leaf and, when the caller has a
// terminal, a pseudo-terminal of its own.
//
// Start with [Start]: it re-executes the running binary as a small init (the
// namespace's PID 1), which mounts the overlay over the workspace, hides
// layerseal's own files, builds the rest of the agent's view (by default a
// root of its own holding the host's [SystemDirs] read-only with the
// [EtcSecrets] masked, private /tmp, /var/tmp, /run, /dev/shm and home, the
// [Sandbox] ReadOnly and Writable paths and the workspace; with Sandbox View
// "host" the host read-only but for the workspace, private /tmp, /var/tmp,
// /run and /dev/shm and the Writable paths; either way a /proc with [Masked]
// and [ReadOnly] paths, /sys read-only, a /dev of [Devices] only) and
// reports [Ready], with the confinement found in force and what of it is
// missing. The caller
// then records what was mounted (the launch record) and calls [Run.Go], after
// which init starts the agent with the requested user, capabilities and
// limits, under the seccomp filter and, where the kernel has Landlock ABI 6,
// in a Landlock domain scoped to its own processes (no abstract unix socket
// or signal reaches outside it). [Run.Wait] returns the agent's exit status together with what init
// saw at the end: processes that outlived the agent (all killed), mounts made
// under the workspace, and whether the agent could rearrange its mounts.
//
// Every binary that calls Start must call [Init] first thing in main (and in
// TestMain of test binaries that launch): that is where the re-executed
// binary becomes init.
package nsrun

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/overlay"
)

// Config is what init needs to set up the namespace and start the agent. It
// travels to init as JSON over an inherited socket, never in argv or the
// environment.
type Config struct {
	// Workspace is the absolute, clean host path of the workspace: the lower
	// layer, and the path the overlay is mounted over.
	Workspace string
	// Upper and Work are overlay's upper and work dirs: empty, on one
	// filesystem, outside the workspace.
	Upper, Work string
	// Unprivileged mounts the overlay with userxattr.
	Unprivileged bool
	// Hide lists host paths the agent must not reach (state dir, signing key,
	// output dir). After the overlay is mounted each is covered: a directory
	// with an empty read-only tmpfs, anything else with a read-only bind of
	// /dev/null. Paths that do not exist are skipped.
	Hide []string
	// Process is the agent. Args[0] is looked up in the PATH of Env. Empty
	// Cwd means Workspace. Nil Env means DefaultEnv. Nil Capabilities leaves
	// init's capabilities in place (all of them: a fully privileged agent
	// when it runs as root). Terminal is ignored: Start sets it when it gives
	// the agent a pseudo-terminal.
	Process specs.Process
	// Sandbox is what else confines the agent.
	Sandbox Sandbox
}

// DefaultEnv is the agent's environment when Config.Process.Env is nil:
// PATH, HOME (/root for uid 0, / otherwise) and the supervisor's TERM, if set.
func DefaultEnv(uid uint32, term string) []string {
	home := "/"
	if uid == 0 {
		home = "/root"
	}
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + home}
	if term != "" {
		env = append(env, "TERM="+term)
	}
	return env
}

// Mount is the overlay this configuration mounts.
func (c *Config) Mount() overlay.Mount {
	return overlay.NewMount(c.Workspace, c.Upper, c.Work, c.Workspace, c.Unprivileged)
}

// Validate checks the configuration without touching the filesystem.
func (c *Config) Validate() error {
	if c.Workspace == "/" {
		return fmt.Errorf("workspace %q: cannot overlay the root directory", c.Workspace)
	}
	if err := c.Mount().Validate(); err != nil {
		return err
	}
	for _, h := range c.Hide {
		if !filepath.IsAbs(h) || filepath.Clean(h) != h || strings.IndexByte(h, 0) >= 0 {
			return fmt.Errorf("hidden path %q: not an absolute, clean path", h)
		}
	}
	if err := c.Sandbox.Validate(); err != nil {
		return err
	}
	if len(c.Process.Args) == 0 || c.Process.Args[0] == "" {
		return errors.New("agent command is empty")
	}
	if c.Process.Cwd != "" && !filepath.IsAbs(c.Process.Cwd) {
		return fmt.Errorf("agent working directory %q: not absolute", c.Process.Cwd)
	}
	if c.Process.Capabilities != nil {
		for _, set := range capSets(c.Process.Capabilities) {
			if _, err := parseCaps(set); err != nil {
				return err
			}
		}
	}
	for _, r := range c.Process.Rlimits {
		if _, ok := rlimits[r.Type]; !ok {
			return fmt.Errorf("rlimit %q: unknown", r.Type)
		}
	}
	return nil
}

// Ready is what init reports once the namespace is set up and before the
// agent starts.
type Ready struct {
	Mounted overlay.Mounted // the overlay options actually in force, and those dropped
	Sandbox attest.Sandbox  // the confinement in force, and what of it is missing
	// rootMoved: init moved the agent's root over the old one (switchRoot).
	rootMoved bool
}

// Result is what init saw of the run.
type Result struct {
	ExitCode int            // the agent's exit code; -1 if a signal ended it
	Signal   int            // the signal that ended the agent (a syscall.Signal), 0 if it exited
	Outlived int            // processes still alive when the agent's main process ended; init killed them
	Mounts   []MountFinding // mounts the agent made or changed, sorted by path
	// CapSysAdmin reports that the agent held CAP_SYS_ADMIN, or could regain
	// it by executing a program (it ran as root, or without no_new_privs with
	// the capability in its bounding set), and so could rearrange its mounts.
	CapSysAdmin bool
	// OOMKills is how many of the agent's processes the kernel killed for
	// reaching its memory limit (the supervisor reads it from the agent's
	// cgroup, v2 or v1, after the agent's end), 0 without a limit.
	OOMKills int64 `json:"-"`
}

// MountFinding is one mount the audit did not expect.
type MountFinding struct {
	Path   attest.Path // mount point relative to the workspace; empty when outside it
	Detail string
}

// ErrCommandNotFound is wrapped by the error from Run.Go when the agent's
// command cannot be found in its PATH (a shell reports this as exit 127).
var ErrCommandNotFound = errors.New("command not found")

// notFound wraps ErrCommandNotFound around msg, an error text passed up
// from a stage that may have wrapped it already, so it is said once.
func notFound(msg string) error {
	for strings.HasPrefix(msg, ErrCommandNotFound.Error()+": ") {
		msg = strings.TrimPrefix(msg, ErrCommandNotFound.Error()+": ")
	}
	return fmt.Errorf("%w: %s", ErrCommandNotFound, msg)
}

// message is one line of the protocol between the supervisor and init.
type message struct {
	Ready   *Ready  `json:",omitempty"` // init: set up, waiting for Go
	Started bool    `json:",omitempty"` // init: agent exec'd
	Result  *Result `json:",omitempty"` // init: agent gone, namespace empty
	Thaw    bool    `json:",omitempty"` // init: processes outlive SIGKILL; thaw them
	Error   string  `json:",omitempty"` // init: setup or start failed
	// NotFound marks Error as a command not found in PATH.
	NotFound bool `json:",omitempty"`
	Go       bool `json:",omitempty"` // supervisor: start the agent
	Signal   int  `json:",omitempty"` // supervisor: deliver this signal to the agent
	Kill     bool `json:",omitempty"` // supervisor: kill everything in the namespace
}
