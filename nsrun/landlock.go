package nsrun

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
)

// scopeABI is the first Landlock ABI version with scopes (Linux 6.12).
const scopeABI = 6

// agentScopes are the Landlock scopes of the agent's domain, by the names
// the launch record gives them: it cannot connect or send to an abstract
// unix socket made outside its domain (the host's, under the host's
// network), nor signal a process outside it. Its own processes share the
// domain and reach each other as before.
var agentScopes = []struct {
	name string
	flag uint64
}{
	{"abstract_unix_socket", unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET},
	{"signal", unix.LANDLOCK_SCOPE_SIGNAL},
}

// landlockABI asks the kernel for its Landlock ABI (a variable for tests).
var landlockABI = linux.LandlockABI

// landlockScope decides the agent's Landlock scopes and records them in
// sb: all of agentScopes when the kernel offers ABI scopeABI or later,
// under every network and seccomp setting, none otherwise (a kernel
// without Landlock, or before Linux 6.12). It returns their flags, 0 for
// none.
func landlockScope(sb *attest.Sandbox) uint64 {
	sb.Scoped = nil
	if abi, err := landlockABI(); err != nil || abi < scopeABI {
		return 0
	}
	var flags uint64
	for _, s := range agentScopes {
		sb.Scoped = append(sb.Scoped, s.name)
		flags |= s.flag
	}
	return flags
}

// restrictScopes puts the calling thread, which then executes the agent,
// in a Landlock domain of its own that handles no file or network access
// and is scoped by scoped (flags of agentScopes). The thread must still
// hold CAP_SYS_ADMIN or have set no_new_privs.
func restrictScopes(scoped uint64) error {
	fd, err := linux.LandlockCreateRuleset(&unix.LandlockRulesetAttr{Scoped: scoped}, 0)
	if err != nil {
		return fmt.Errorf("scope the agent with Landlock: %w", err)
	}
	defer unix.Close(fd)
	if err := linux.LandlockRestrictSelf(fd, 0); err != nil {
		return fmt.Errorf("scope the agent with Landlock: %w", err)
	}
	return nil
}
