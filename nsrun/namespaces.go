package nsrun

import (
	"fmt"
	"slices"

	"golang.org/x/sys/unix"
)

// hostname is the agent's host name, in its UTS namespace.
const hostname = "layerseal"

// namespaces are the namespaces init is created in (clone flags) and their
// names in the launch record, sorted: mount, PID, IPC, UTS and cgroup
// always, network unless the agent shares the host's.
func namespaces(sb Sandbox) (uintptr, []string) {
	flags := uintptr(unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP)
	names := []string{"cgroup", "ipc", "mount", "pid", "uts"}
	if sb.withDefaults().Network != "host" {
		flags |= unix.CLONE_NEWNET
		names = append(names, "net")
	}
	slices.Sort(names)
	return flags, names
}

// setupNamespaces is init's part in the namespaces it was created in: the
// host name, and the loopback interface up in a network namespace of its
// own (network "none" or "proxy").
func setupNamespaces(sb Sandbox) error {
	if err := unix.Sethostname([]byte(hostname)); err != nil {
		return fmt.Errorf("set the agent's host name to %q: %w", hostname, err)
	}
	if sb.withDefaults().Network != "host" {
		if err := loopbackUp(); err != nil {
			return fmt.Errorf("bring up the loopback interface of the agent's network: %w", err)
		}
	}
	return nil
}

// loopbackUp sets IFF_UP on "lo" with SIOCSIFFLAGS.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("ioctl SIOCGIFFLAGS lo: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("ioctl SIOCSIFFLAGS lo up: %w", err)
	}
	return nil
}
