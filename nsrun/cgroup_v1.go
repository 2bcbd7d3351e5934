package nsrun

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/layerseal/layerseal/attest"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// DefaultPidsMax is the agent's limit of processes and threads when the
// caller names none: enough for builds and test runners (threads count, and
// a Go build or a Node.js test run on a large machine has some hundreds),
// far below the host's pid_max (32,768 at the least), so that a fork bomb
// ends in failed forks, not in a host that can start nothing.
const DefaultPidsMax = 4096

// NoPidsLimit as Sandbox.PidsMax asks for no limit of processes.
const NoPidsLimit = -1

// v1Cgroups are the agent's leaves in the cgroup v1 hierarchies that hold
// the controllers of its limits where the cgroup v2 hierarchy lacks them
// (a hybrid host binds memory and pids to v1 hierarchies, as runc finds
// them): one leaf per controller, named like the v2 leaf, under
// /layerseal in that hierarchy, with its limit written before init starts.
// Init is forked by a thread placed in each leaf for the fork (start), so
// init, and the agent after it, are in them from their first instruction,
// and with a cgroup namespace made at that fork the leaves are the roots of
// the agent's view of those hierarchies too. The agent cannot leave them.
type v1Cgroups struct {
	leaves []*v1Leaf
}

// v1Leaf is one leaf in a cgroup v1 hierarchy.
type v1Leaf struct {
	ctl   string // "memory" or "pids"
	root  string // the hierarchy's mount point
	rel   string // the leaf's path in the hierarchy, "/layerseal/..."
	dir   string // the leaf's directory in the supervisor's view
	limit int64  // what was written
	swap  bool   // memory: memory.memsw.limit_in_bytes was written too
}

// newV1Cgroups makes a leaf named leaf for each controller in lost (the
// limits the cgroup v2 hierarchy could not hold) in a cgroup v1 hierarchy
// with that controller, and writes its limit: pids.max, or
// memory.limit_in_bytes and, where the kernel accounts swap,
// memory.memsw.limit_in_bytes to the same value, so that swapping does
// not take the agent past it. It returns the leaves (nil when none) and
// the limits it could not set either, each with why.
func newV1Cgroups(sb Sandbox, leaf string, lost map[string]string) (*v1Cgroups, map[string]string) {
	if len(lost) == 0 {
		return nil, lost
	}
	mounts, err := v1Mounts()
	left := map[string]string{}
	v := &v1Cgroups{}
	for _, ctl := range []string{"memory", "pids"} {
		why, ok := lost[ctl]
		if !ok {
			continue
		}
		limit := map[string]int64{"memory": sb.MemoryMax, "pids": sb.PidsMax}[ctl]
		root := mounts[ctl]
		switch {
		case err != nil:
			left[ctl] = fmt.Sprintf("%s; the mount table could not be read for a cgroup v1 hierarchy (%v)", why, err)
			continue
		case root == "":
			left[ctl] = fmt.Sprintf("%s, and no cgroup v1 hierarchy has it", why)
			continue
		}
		// Memory and pids bound to one hierarchy share its leaf.
		shared := slices.ContainsFunc(v.leaves, func(o *v1Leaf) bool { return o.root == root })
		l, err := makeV1Leaf(ctl, root, leaf, limit, shared)
		if err != nil {
			left[ctl] = fmt.Sprintf("%s, and in the cgroup v1 hierarchy at %q %v", why, root, err)
			continue
		}
		v.leaves = append(v.leaves, l)
	}
	if len(v.leaves) == 0 {
		return nil, left
	}
	return v, left
}

// makeV1Leaf makes the leaf name under /layerseal in the v1 hierarchy of
// ctl mounted at root (unless shared: another controller's leaf there made
// it already) and writes limit there; on error it removes what it made.
func makeV1Leaf(ctl, root, name string, limit int64, shared bool) (*v1Leaf, error) {
	parent := filepath.Join(root, cgroupParent)
	l := &v1Leaf{ctl: ctl, root: root, rel: "/" + cgroupParent + "/" + name, dir: filepath.Join(parent, name), limit: limit}
	if !shared {
		if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("%q could not be made (%v)", parent, err)
		}
		removeStale(parent)
		if err := os.Mkdir(l.dir, 0o755); err != nil {
			return nil, fmt.Errorf("%q could not be made (%v)", l.dir, err)
		}
	}
	write := func(file string) error {
		if err := os.WriteFile(filepath.Join(l.dir, file), []byte(strconv.FormatInt(limit, 10)), 0); err != nil {
			if !shared {
				unix.Rmdir(l.dir)
			}
			return fmt.Errorf("%s could not be written (%v)", file, err)
		}
		return nil
	}
	if ctl == "pids" {
		return l, write("pids.max")
	}
	if err := write("memory.limit_in_bytes"); err != nil {
		return nil, err
	}
	if exists(filepath.Join(l.dir, "memory.memsw.limit_in_bytes")) {
		if err := write("memory.memsw.limit_in_bytes"); err != nil {
			return nil, err
		}
		l.swap = true
	}
	return l, nil
}

// v1Mounts finds, in the mount table, the mount point of the cgroup v1
// hierarchy of each of the memory and pids controllers that one has, mounted
// at the hierarchy's root.
func v1Mounts() (map[string]string, error) {
	infos, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup"))
	if err != nil {
		return nil, err
	}
	found := map[string]string{}
	for _, m := range infos {
		opts := strings.Split(m.VFSOptions, ",")
		for _, ctl := range []string{"memory", "pids"} {
			if found[ctl] == "" && m.Root == "/" && slices.Contains(opts, ctl) {
				found[ctl] = m.Mountpoint
			}
		}
	}
	return found, nil
}

// start starts cmd from a thread placed in each leaf for the fork, which
// init inherits, then moves that thread back where it was. Should it not
// go back, init is killed and the thread ends with its goroutine (which
// must be a fresh one: see Start), and an error says so. Nil v starts cmd
// as it is.
func (v *v1Cgroups) start(cmd *exec.Cmd) error {
	if v == nil {
		return cmd.Start()
	}
	runtime.LockOSThread()
	tid := strconv.Itoa(unix.Gettid())
	home, err := threadCgroups()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("start init in the agent's cgroup v1 leaves: %w", err)
	}
	back := func() error {
		var errs []error
		for _, l := range v.leaves {
			p, ok := home[l.ctl]
			if !ok {
				errs = append(errs, fmt.Errorf("this thread's %s cgroup is not in /proc/thread-self/cgroup", l.ctl))
				continue
			}
			if err := os.WriteFile(filepath.Join(l.root, p, "tasks"), []byte(tid), 0); err != nil {
				errs = append(errs, fmt.Errorf("move the supervisor's thread back to the %s cgroup %q: %w", l.ctl, p, err))
			}
		}
		return errors.Join(errs...)
	}
	for _, l := range v.leaves {
		if err = os.WriteFile(filepath.Join(l.dir, "tasks"), []byte(tid), 0); err != nil {
			err = fmt.Errorf("place init in the agent's %s cgroup %q: %w", l.ctl, l.dir, err)
			break
		}
	}
	if err == nil {
		err = cmd.Start()
	}
	if berr := back(); berr != nil {
		if cmd.Process != nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		return errors.Join(err, berr) // the thread stays locked, and ends
	}
	runtime.UnlockOSThread()
	return err
}

// threadCgroups reads the calling thread's cgroup in each v1 hierarchy of
// the memory and pids controllers, by controller.
func threadCgroups() (map[string]string, error) {
	b, err := os.ReadFile("/proc/thread-self/cgroup")
	if err != nil {
		return nil, err
	}
	return parseV1Cgroups(b), nil
}

// parseV1Cgroups reads /proc/PID/cgroup lines ("ID:CONTROLLERS:PATH") into
// the path of each of the memory and pids controllers named.
func parseV1Cgroups(b []byte) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		_, rest, _ := strings.Cut(sc.Text(), ":")
		ctls, path, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		for _, c := range strings.Split(ctls, ",") {
			if c == "memory" || c == "pids" {
				out[c] = path
			}
		}
	}
	return out
}

// record sets in sb the limits the v1 leaves hold and where.
func (v *v1Cgroups) record(sb *attest.Sandbox) {
	if v == nil {
		return
	}
	sb.CgroupV1 = map[string]string{}
	for _, l := range v.leaves {
		sb.CgroupV1[l.ctl] = l.rel
		if l.ctl == "memory" {
			sb.MemoryMax = l.limit
		} else {
			sb.PidsMax = l.limit
		}
	}
}

// oomKills is how many processes the kernel killed for reaching the memory
// leaf's limit (memory.oom_control's oom_kill), 0 without one.
func (v *v1Cgroups) oomKills() int64 {
	if v == nil {
		return 0
	}
	for _, l := range v.leaves {
		if l.ctl == "memory" {
			b, _ := os.ReadFile(filepath.Join(l.dir, "memory.oom_control"))
			return countOf(b, "oom_kill")
		}
	}
	return 0
}

// oomKills is how many processes the kernel killed for reaching the leaf's
// memory.max (memory.events' oom_kill), 0 without a leaf.
func (c *cgroup) oomKills() int64 {
	if c == nil || c.mem == 0 {
		return 0
	}
	b, _ := os.ReadFile(filepath.Join(c.dir, "memory.events"))
	return countOf(b, "oom_kill")
}

// countOf reads the value of key from "KEY VALUE" lines, 0 when absent.
func countOf(b []byte, key string) int64 {
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// destroy removes the leaves once they are empty; init has exited, and with
// it every process of its PID namespace. It reports an error when a leaf is
// still populated after cgroupDrain.
func (v *v1Cgroups) destroy() error {
	if v == nil {
		return nil
	}
	var errs []error
	end := time.Now().Add(cgroupDrain)
	for _, l := range v.leaves {
		for {
			err := unix.Rmdir(l.dir)
			if err == nil || errors.Is(err, unix.ENOENT) {
				break
			}
			if !errors.Is(err, unix.EBUSY) || time.Now().After(end) {
				errs = append(errs, fmt.Errorf("remove the agent's cgroup %q: %w", l.dir, err))
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	v.leaves = nil
	return errors.Join(errs...)
}
