package nsrun

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/layerseal/layerseal/internal/linux"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// cgroupParent is the layerseal-owned cgroup, under the root of the cgroup
// v2 hierarchy, that holds one leaf per run.
const cgroupParent = "layerseal"

// cgroupDrain bounds how long teardown waits for the leaf to empty.
const cgroupDrain = 5 * time.Second

// cgroup is the agent's cgroup v2 leaf, as the supervisor sees it. Init is
// created in it (clone3 CLONE_INTO_CGROUP), so the agent and everything it
// starts are in it from the first instruction, and with a cgroup namespace
// of its own the leaf is the root of the agent's view. The agent cannot
// leave it; teardown kills everything in it.
type cgroup struct {
	rel      string   // the leaf's path in the hierarchy, "/layerseal/..."
	dir      string   // the leaf's directory in the supervisor's view
	fd       *os.File // the leaf's directory, for CLONE_INTO_CGROUP
	kill     string   // "cgroup.kill", "freeze" or ""
	freezer  string   // the root of a cgroup v1 freezer hierarchy, "" if none
	mem, pid int64    // memory.max and pids.max written, 0 when none
}

// newCgroup makes the agent's cgroup v2 leaf and writes the limits sb asks
// for (DefaultPidsMax processes when it names none), each in the v2 leaf or,
// where the v2 hierarchy lacks its controller, in a leaf of the same name
// in the cgroup v1 hierarchy that has it (newV1Cgroups). What it cannot
// give is returned as sentences for the launch record's missing list, but
// for the default limit of processes, which is left out silently (the
// launch record's pids_max is then 0); with no usable cgroup v2 hierarchy
// it returns a nil cgroup.
func newCgroup(sb Sandbox) (*cgroup, *v1Cgroups, []string) {
	asked := sb.PidsMax != 0
	sb = sb.withDefaults()
	var name [8]byte
	rand.Read(name[:])
	leaf := fmt.Sprintf("%d-%s", os.Getpid(), hex.EncodeToString(name[:]))
	c, missing, lost := newV2Cgroup(sb, leaf)
	v1, lost := newV1Cgroups(sb, leaf, lost)
	for _, ctl := range []string{"memory", "pids"} {
		why, ok := lost[ctl]
		switch {
		case !ok:
		case ctl == "memory":
			missing = append(missing, fmt.Sprintf("memory limit of %d bytes not set: %s", sb.MemoryMax, why))
		case asked:
			missing = append(missing, fmt.Sprintf("limit of %d processes not set: %s", sb.PidsMax, why))
		}
	}
	return c, v1, missing
}

// newV2Cgroup makes the agent's cgroup v2 leaf and writes there the limits
// its controllers allow. It returns what it cannot give: sentences for the
// launch record's missing list, and the limits not set, by controller
// ("memory", "pids"), each with why.
func newV2Cgroup(sb Sandbox, leaf string) (*cgroup, []string, map[string]string) {
	var missing []string
	lost := map[string]string{}
	limitsLost := func(why string) {
		if sb.MemoryMax > 0 {
			lost["memory"] = why
		}
		if sb.PidsMax > 0 {
			lost["pids"] = why
		}
	}
	root, freezer, err := cgroupMounts()
	if err != nil || root == "" {
		why := "no cgroup v2 hierarchy is mounted"
		if err != nil {
			why = fmt.Sprintf("the mount table could not be read (%v)", err)
		}
		missing = append(missing, "no cgroup of its own: "+why+"; the agent's processes are held by its PID namespace alone")
		limitsLost(why)
		return nil, missing, lost
	}
	c := &cgroup{freezer: freezer}
	parent := filepath.Join(root, cgroupParent)
	if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		why := fmt.Sprintf("the cgroup v2 hierarchy at %q is not writable (%v)", root, err)
		missing = append(missing, "no cgroup of its own: "+why+"; the agent's processes are held by its PID namespace alone")
		limitsLost(why)
		return nil, missing, lost
	}
	removeStale(parent)
	want := map[string]int64{"memory": sb.MemoryMax, "pids": max(sb.PidsMax, 0)}
	enabled := map[string]bool{}
	for _, ctl := range []string{"memory", "pids"} {
		if want[ctl] == 0 {
			continue
		}
		if err := enableController(root, parent, ctl); err != nil {
			lost[ctl] = err.Error()
			continue
		}
		enabled[ctl] = true
	}
	c.rel, c.dir = "/"+cgroupParent+"/"+leaf, filepath.Join(parent, leaf)
	if err := os.Mkdir(c.dir, 0o755); err != nil {
		why := fmt.Sprintf("the cgroup %q could not be made (%v)", c.dir, err)
		missing = append(missing, "no cgroup of its own: "+why+"; the agent's processes are held by its PID namespace alone")
		limitsLost(why)
		return nil, missing, lost
	}
	for ctl, file := range map[string]string{"memory": "memory.max", "pids": "pids.max"} {
		if !enabled[ctl] {
			continue
		}
		if err := os.WriteFile(filepath.Join(c.dir, file), []byte(strconv.FormatInt(want[ctl], 10)), 0); err != nil {
			lost[ctl] = fmt.Sprintf("%s could not be written (%v)", file, err)
			continue
		}
		if ctl == "memory" {
			c.mem = want[ctl]
		} else {
			c.pid = want[ctl]
		}
	}
	switch {
	case exists(filepath.Join(c.dir, "cgroup.kill")):
		c.kill = "cgroup.kill"
	case exists(filepath.Join(c.dir, "cgroup.freeze")):
		c.kill = "freeze"
	default:
		missing = append(missing, "the kernel has neither cgroup.kill nor cgroup.freeze: teardown kills the agent's processes one by one, and a process frozen elsewhere could outlive the run")
	}
	if c.fd, err = os.Open(c.dir); err != nil {
		os.Remove(c.dir)
		why := fmt.Sprintf("the cgroup %q could not be opened (%v)", c.dir, err)
		limitsLost(why)
		return nil, append(missing, "no cgroup of its own: "+why), lost
	}
	return c, missing, lost
}

// removeStale removes the empty leaves under parent whose supervisor (the
// pid their name starts with) is gone: a supervisor that was killed leaves
// its leaf behind, emptied by the parent-death signal of init.
func removeStale(parent string) {
	ents, _ := os.ReadDir(parent)
	for _, e := range ents {
		pid, _, ok := strings.Cut(e.Name(), "-")
		if !e.IsDir() || !ok {
			continue
		}
		if n, err := strconv.Atoi(pid); err != nil || n <= 0 || unix.Kill(n, 0) != unix.ESRCH {
			continue
		}
		_ = unix.Rmdir(filepath.Join(parent, e.Name())) // fails, harmlessly, on a populated one
	}
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// cgroupMounts finds the cgroup v2 hierarchy and a cgroup v1 hierarchy with
// the freezer controller in the mount table ("" for each not mounted).
func cgroupMounts() (v2, freezer string, _ error) {
	infos, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup2", "cgroup"))
	if err != nil {
		return "", "", err
	}
	for _, m := range infos {
		switch {
		case m.FSType == "cgroup2" && v2 == "" && m.Root == "/":
			v2 = m.Mountpoint
		case m.FSType == "cgroup" && freezer == "" && slices.Contains(strings.Split(m.VFSOptions, ","), "freezer"):
			freezer = m.Mountpoint
		}
	}
	return v2, freezer, nil
}

// enableController makes ctl available to the leaves under parent.
func enableController(root, parent, ctl string) error {
	avail, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("the cgroup v2 controllers could not be read (%v)", err)
	}
	if !slices.Contains(strings.Fields(string(avail)), ctl) {
		return fmt.Errorf("the %s controller is not available in the cgroup v2 hierarchy", ctl)
	}
	for _, dir := range []string{root, parent} {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+ctl), 0); err != nil {
			return fmt.Errorf("the %s controller could not be enabled in %q (%v)", ctl, dir, err)
		}
	}
	return nil
}

// procs lists the processes (host pids) in the leaf and its descendants,
// and the descendants' directories, deepest first.
func (c *cgroup) procs() (pids []int, dirs []string) {
	var walk func(dir string)
	walk = func(dir string) {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if e.IsDir() {
				walk(filepath.Join(dir, e.Name()))
			}
		}
		b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		dirs = append(dirs, dir)
	}
	walk(c.dir)
	return pids, dirs
}

// populated reports whether any process is left in the leaf or below.
func (c *cgroup) populated() bool {
	b, err := os.ReadFile(filepath.Join(c.dir, "cgroup.events"))
	if err != nil {
		return false
	}
	return bytes.Contains(b, []byte("populated 1"))
}

// thawV1 moves every process of the leaf into the root of the cgroup v1
// freezer hierarchy, which thaws those frozen there: a process frozen by
// the v1 freezer ignores SIGKILL until it is thawed.
func (c *cgroup) thawV1() {
	if c.freezer == "" {
		return
	}
	pids, _ := c.procs()
	for _, pid := range pids {
		_ = os.WriteFile(filepath.Join(c.freezer, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
	}
}

// killAll kills every process in the leaf and below, frozen ones included:
// with cgroup.kill, or by freezing the leaf, killing each process and
// thawing it where the kernel has no cgroup.kill.
func (c *cgroup) killAll() {
	c.thawV1()
	switch c.kill {
	case "cgroup.kill":
		_ = os.WriteFile(filepath.Join(c.dir, "cgroup.kill"), []byte("1"), 0)
	case "freeze":
		w, _ := linux.WatchModify(filepath.Join(c.dir, "cgroup.events"))
		_ = os.WriteFile(filepath.Join(c.dir, "cgroup.freeze"), []byte("1"), 0)
		for end := time.Now().Add(time.Second); time.Now().Before(end); waitEvents(w, time.Until(end)) {
			if b, err := os.ReadFile(filepath.Join(c.dir, "cgroup.events")); err != nil || bytes.Contains(b, []byte("frozen 1")) {
				break
			}
		}
		closeWatch(w)
		pids, _ := c.procs()
		for _, pid := range pids {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		_ = os.WriteFile(filepath.Join(c.dir, "cgroup.freeze"), []byte("0"), 0)
	default:
		pids, _ := c.procs()
		for _, pid := range pids {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
}

// destroy kills what is left in the leaf, waits for it to empty and removes
// it. It reports an error when processes are still there after cgroupDrain.
func (c *cgroup) destroy() error {
	defer c.fd.Close()
	var w *linux.FileWatch
	defer func() { closeWatch(w) }()
	for end, watched := time.Now().Add(cgroupDrain), false; c.populated(); waitEvents(w, time.Until(end)) {
		if !watched {
			// Watched only when needed (the leaf is usually empty by now),
			// and looked at again: a change after the watch wakes the wait.
			watched = true
			if w, _ = linux.WatchModify(filepath.Join(c.dir, "cgroup.events")); !c.populated() {
				break
			}
		}
		if time.Now().After(end) {
			pids, _ := c.procs()
			return fmt.Errorf("processes %v are still in the agent's cgroup %q after %v", pids, c.dir, cgroupDrain)
		}
		c.killAll()
	}
	_, dirs := c.procs()
	for _, d := range dirs {
		if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("remove the agent's cgroup %q: %w", d, err)
		}
	}
	return nil
}

// closeWatch closes w, if any, in the background: closing an inotify
// instance waits for an SRCU grace period (10-20 ms measured), which no
// caller needs to wait for.
func closeWatch(w *linux.FileWatch) {
	if w != nil {
		go w.Close()
	}
}

// waitEvents waits until the leaf's cgroup.events changes (w) or left has
// passed, but at most 100ms, after which the caller looks again and kills
// anew what a fork may have added. Without a watch it sleeps 10ms.
func waitEvents(w *linux.FileWatch, left time.Duration) {
	left = max(min(left, 100*time.Millisecond), 0)
	if w == nil {
		time.Sleep(min(left, 10*time.Millisecond))
		return
	}
	w.Wait(left)
}
