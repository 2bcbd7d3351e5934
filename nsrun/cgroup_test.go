package nsrun

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/internal/privtest"
)

// cgroupOrMissing returns the cgroup v2 mount and the v1 freezer mount; with
// no cgroup v2 hierarchy it checks that the launch record says the agent
// had no cgroup of its own (an incomplete statement), and returns "".
func cgroupOrMissing(t *testing.T) (v2, freezer string) {
	t.Helper()
	v2, freezer, err := cgroupMounts()
	if err != nil {
		t.Fatal(err)
	}
	if v2 != "" {
		return v2, freezer
	}
	e := newEnv(t)
	run, err := Start(sh(e, "true"), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ready, err := run.Ready()
	run.Abort()
	if err != nil {
		t.Fatal(err)
	}
	if ready.Sandbox.Cgroup != "" || len(ready.Sandbox.Missing) == 0 || !strings.Contains(ready.Sandbox.Missing[0], "no cgroup of its own") {
		t.Fatalf("no cgroup v2 hierarchy here, but the launch record says cgroup %q, missing %q", ready.Sandbox.Cgroup, ready.Sandbox.Missing)
	}
	t.Logf("no cgroup v2 hierarchy: the launch record says %q", ready.Sandbox.Missing)
	return "", ""
}

// TestCgroupLeaf: the agent runs in a leaf of its own under /layerseal,
// which is the root of its cgroup namespace and is gone after the run;
// limits are written where the controller is in the v2 hierarchy, else in
// a v1 leaf of the same name (also the root of the agent's view of that
// hierarchy, and gone after), and are missing (with a sentence) where no
// hierarchy has the controller.
func TestCgroupLeaf(t *testing.T) {
	privtest.Require(t)
	v2, _ := cgroupOrMissing(t)
	if v2 == "" {
		return
	}
	e := newEnv(t)
	cfg := sh(e, `cat /proc/self/cgroup`)
	cfg.Sandbox.PidsMax, cfg.Sandbox.MemoryMax = 64, 64<<20
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	run, err := Start(cfg, nil, w, agentStderr(t))
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	ready, err := run.Ready()
	if err != nil {
		t.Fatal(err)
	}
	sb := ready.Sandbox
	if !strings.HasPrefix(sb.Cgroup, "/layerseal/") || sb.CgroupKill == "" {
		t.Fatalf("launch record: cgroup %q kill %q", sb.Cgroup, sb.CgroupKill)
	}
	leaf := filepath.Join(v2, sb.Cgroup)
	v1mounts, err := v1Mounts()
	if err != nil {
		t.Fatal(err)
	}
	v1leaf := func(ctl string) string { return filepath.Join(v1mounts[ctl], sb.CgroupV1[ctl]) }
	for file, v := range map[string]int64{"pids.max": sb.PidsMax, "memory.max": sb.MemoryMax} {
		dir := leaf
		if ctl, _, _ := strings.Cut(file, "."); sb.CgroupV1[ctl] != "" {
			dir = v1leaf(ctl)
			file = map[string]string{"pids": "pids.max", "memory": "memory.limit_in_bytes"}[ctl]
		}
		if b, err := os.ReadFile(filepath.Join(dir, file)); v != 0 && (err != nil || strings.TrimSpace(string(b)) != strconv.FormatInt(v, 10)) {
			t.Errorf("the leaf's %s is %q (%v), the launch record says %d", file, b, err, v)
		}
	}
	if err := run.Go(); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, 4096)
	n, _ := readAll(r, out)
	res, err := run.Wait()
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("run: %+v %v", res, err)
	}
	if !strings.Contains(string(out[:n]), "0::/\n") {
		t.Errorf("the agent's /proc/self/cgroup:\n%s\nwant 0::/ (its leaf is its namespace's root)", out[:n])
	}
	if _, err := os.Stat(leaf); !os.IsNotExist(err) {
		t.Errorf("the leaf %s is still there after the run (%v)", leaf, err)
	}
	for ctl := range sb.CgroupV1 {
		if _, err := os.Stat(v1leaf(ctl)); !os.IsNotExist(err) {
			t.Errorf("the v1 leaf %s is still there after the run (%v)", v1leaf(ctl), err)
		}
	}
	if sb.PidsMax != 0 && sb.PidsMax != 64 || sb.MemoryMax != 0 && sb.MemoryMax != 64<<20 {
		t.Errorf("launch record: pids max %d, memory max %d", sb.PidsMax, sb.MemoryMax)
	}
	controllers, _ := os.ReadFile(filepath.Join(v2, "cgroup.controllers"))
	v1, err := v1Mounts()
	if err != nil {
		t.Fatal(err)
	}
	for ctl, got := range map[string]int64{"pids": sb.PidsMax, "memory": sb.MemoryMax} {
		has := strings.Contains(" "+strings.TrimSpace(string(controllers))+" ", " "+ctl+" ")
		said := strings.Contains(strings.Join(sb.Missing, "\n"), "the "+ctl+" controller")
		inV1 := !has && v1[ctl] != ""
		if has && (got == 0 || said) || inV1 && (got == 0 || said) || !has && !inV1 && (got != 0 || !said) {
			t.Errorf("%s controller in v2=%v, in v1=%v: launch record says %d, missing %q", ctl, has, inV1, got, sb.Missing)
		}
		if inV1 != (sb.CgroupV1[ctl] == sb.Cgroup) {
			t.Errorf("%s controller in v1=%v: launch record's cgroup_v1 is %q", ctl, inV1, sb.CgroupV1)
		}
		if inV1 && !strings.Contains(string(out[:n]), ":"+ctl+":/\n") {
			t.Errorf("the agent's /proc/self/cgroup:\n%s\nwant %s:/ (its v1 leaf is its namespace's root)", out[:n], ctl)
		}
	}
}

// TestFrozenProcessTeardown is the teardown half of attack 4: a process of
// the agent's frozen by the cgroup v1 freezer (here by the test, from
// outside) ignores SIGKILL, and before the leaf init waited for it forever.
// The run must end promptly, the frozen process counted as outliving the
// agent and gone. Where no v1 freezer is mounted (a pure cgroup v2 host),
// the test mounts one, as a root agent could have on the host before.
func TestFrozenProcessTeardown(t *testing.T) {
	privtest.Require(t)
	v2, freezer := cgroupOrMissing(t)
	if v2 == "" {
		return
	}
	if freezer == "" {
		freezer = t.TempDir()
		if err := unix.Mount("layerseal-test-freezer", freezer, "cgroup", 0, "freezer"); err != nil {
			t.Fatalf("mount a cgroup v1 freezer hierarchy: %v", err)
		}
		t.Cleanup(func() { unix.Unmount(freezer, unix.MNT_DETACH) })
	}
	e := newEnv(t)
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer inW.Close()
	run, err := Start(sh(e, `sleep 1000 & read x`), inR, nil, agentStderr(t))
	inR.Close()
	if err != nil {
		t.Fatal(err)
	}
	ready, err := run.Ready()
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Go(); err != nil {
		t.Fatal(err)
	}
	leaf := filepath.Join(v2, ready.Sandbox.Cgroup)
	var sleeper int
	for end := time.Now().Add(10 * time.Second); sleeper == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			run.Abort()
			t.Fatal("the agent's sleep never showed up in its cgroup")
		}
		b, _ := os.ReadFile(filepath.Join(leaf, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			pid, _ := strconv.Atoi(f)
			if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); string(comm) == "sleep\n" {
				sleeper = pid
			}
		}
	}
	var frozen string
	if freezer != "" {
		frozen = filepath.Join(freezer, fmt.Sprintf("layerseal-test-%d", os.Getpid()))
		must(t, os.Mkdir(frozen, 0o755))
		t.Cleanup(func() {
			os.WriteFile(filepath.Join(frozen, "freezer.state"), []byte("THAWED"), 0)
			for i := 0; i < 100 && os.Remove(frozen) != nil; i++ {
				time.Sleep(20 * time.Millisecond)
			}
		})
		must(t, os.WriteFile(filepath.Join(frozen, "cgroup.procs"), []byte(strconv.Itoa(sleeper)), 0))
		must(t, os.WriteFile(filepath.Join(frozen, "freezer.state"), []byte("FROZEN"), 0))
	} else {
		frozen = filepath.Join(leaf, "frozen")
		must(t, os.Mkdir(frozen, 0o755))
		must(t, os.WriteFile(filepath.Join(frozen, "cgroup.procs"), []byte(strconv.Itoa(sleeper)), 0))
		must(t, os.WriteFile(filepath.Join(frozen, "cgroup.freeze"), []byte("1"), 0))
	}
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", sleeper))
		if f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:])); len(f) > 0 && (f[0] == "D" || f[0] == "T") {
			break
		}
		if time.Now().After(end) {
			t.Logf("the sleep's state: %q", stat)
			break
		}
	}
	inW.Write([]byte("go\n"))
	type waited struct {
		res Result
		err error
	}
	done := make(chan waited, 1)
	start := time.Now()
	go func() { res, err := run.Wait(); done <- waited{res, err} }()
	select {
	case w := <-done:
		if w.err != nil || w.res.Outlived != 1 {
			t.Errorf("run: %+v %v, want the frozen process counted as outliving the agent", w.res, w.err)
		}
		t.Logf("the run ended %v after the agent", time.Since(start).Round(time.Millisecond))
	case <-time.After(20 * time.Second):
		os.WriteFile(filepath.Join(frozen, "freezer.state"), []byte("THAWED"), 0)
		os.WriteFile(filepath.Join(frozen, "cgroup.freeze"), []byte("0"), 0)
		<-done
		t.Fatal("the run did not end within 20s of the agent: teardown hung on a frozen process")
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", sleeper)); err == nil {
		t.Errorf("the frozen process %d is still there", sleeper)
	}
	if _, err := os.Stat(leaf); !os.IsNotExist(err) {
		t.Errorf("the leaf %s is still there after the run (%v)", leaf, err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestCgroupKillFrozen: teardown kills processes in a leaf the agent froze
// (cgroup v2 cgroup.freeze) with either method, cgroup.kill or
// freeze-then-kill (the method where cgroup.kill is missing, forced here),
// and removes the leaf.
func TestCgroupKillFrozen(t *testing.T) {
	privtest.Require(t)
	if v2, _ := cgroupOrMissing(t); v2 == "" {
		return
	}
	for _, method := range []string{"cgroup.kill", "freeze"} {
		t.Run(method, func(t *testing.T) {
			c, _, missing := newCgroup(Sandbox{PidsMax: NoPidsLimit})
			if c == nil {
				t.Fatalf("no cgroup: %q", missing)
			}
			if method == "freeze" && !exists(filepath.Join(c.dir, "cgroup.freeze")) {
				t.Fatalf("no cgroup.freeze in %s", c.dir)
			}
			if method == "cgroup.kill" && !exists(filepath.Join(c.dir, "cgroup.kill")) {
				// Before Linux 5.14: teardown must use the fallback, tested below.
				if c.kill != "freeze" {
					t.Errorf("no cgroup.kill on this kernel, but teardown would use %q", c.kill)
				}
				return
			}
			c.kill = method
			cmd := exec.Command("sleep", "1000")
			cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(c.fd.Fd())}
			must(t, cmd.Start())
			waited := make(chan error, 1)
			go func() { waited <- cmd.Wait() }()
			must(t, os.WriteFile(filepath.Join(c.dir, "cgroup.freeze"), []byte("1"), 0))
			if err := c.destroy(); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-waited:
				if ws, ok := err.(*exec.ExitError); !ok || ws.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
					t.Errorf("the frozen process ended with %v, want SIGKILL", err)
				}
			case <-time.After(5 * time.Second):
				cmd.Process.Kill()
				t.Fatal("the frozen process survived teardown")
			}
			if exists(c.dir) {
				t.Errorf("the leaf %s is still there", c.dir)
			}
		})
	}
}
