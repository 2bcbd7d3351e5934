package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/nsrun"
)

// limitHolder says which cgroup hierarchy this host offers for controller
// ctl ("memory", "pids"): "v2" when the cgroup v2 hierarchy has it, else
// the mount point of the cgroup v1 hierarchy that has it, else "".
func limitHolder(t *testing.T, ctl string) string {
	t.Helper()
	infos, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup2", "cgroup"))
	if err != nil {
		t.Fatal(err)
	}
	v1 := ""
	for _, m := range infos {
		if m.Root != "/" {
			continue
		}
		if m.FSType == "cgroup2" {
			b, _ := os.ReadFile(filepath.Join(m.Mountpoint, "cgroup.controllers"))
			if slices.Contains(strings.Fields(string(b)), ctl) {
				return "v2"
			}
		} else if v1 == "" && slices.Contains(strings.Split(m.VFSOptions, ","), ctl) {
			v1 = m.Mountpoint
		}
	}
	return v1
}

// checkLimit fails t unless the launch record's sandbox says limit for ctl
// was held where this host offers it (limitHolder): in the v2 leaf, or in a
// v1 leaf of the same name, which is gone after the run. It reports
// whether the limit was held; where no hierarchy has ctl, the record must
// say the limit is missing.
func checkLimit(t *testing.T, sb attest.Sandbox, ctl string, limit int64) bool {
	t.Helper()
	got := map[string]int64{"memory": sb.MemoryMax, "pids": sb.PidsMax}[ctl]
	switch holder := limitHolder(t, ctl); holder {
	case "":
		if got != 0 || !strings.Contains(strings.Join(sb.Missing, "\n"), "no cgroup v1 hierarchy has it") {
			t.Errorf("no hierarchy has the %s controller here, but the launch record says %d, missing %q", ctl, got, sb.Missing)
		}
		t.Logf("no cgroup hierarchy has the %s controller on this host: the limit cannot hold, and the launch record says so", ctl)
		return false
	case "v2":
		if got != limit || sb.CgroupV1[ctl] != "" {
			t.Errorf("%s limit: launch record says %d, cgroup_v1 %q; want %d in the v2 leaf", ctl, got, sb.CgroupV1, limit)
		}
	default:
		if got != limit || sb.CgroupV1[ctl] != sb.Cgroup || sb.Cgroup == "" {
			t.Errorf("%s limit: launch record says %d, cgroup_v1 %q, cgroup %q; want %d in the v1 leaf named like the v2 one", ctl, got, sb.CgroupV1, sb.Cgroup, limit)
		}
		if _, err := os.Stat(filepath.Join(holder, sb.CgroupV1[ctl])); sb.CgroupV1[ctl] != "" && !os.IsNotExist(err) {
			t.Errorf("the v1 %s leaf %s is still there after the run (%v)", ctl, sb.CgroupV1[ctl], err)
		}
	}
	return true
}

// procsRE reads what the limit scripts print: how many processes the
// agent's PID namespace held once forking failed.
var procsRE = regexp.MustCompile(`procs: (\d+)\n`)

// forkUntilRefused forks, from a subshell, up to n processes that wait
// without running anything (a read of a FIFO nobody writes), counts the
// processes of the PID namespace with shell builtins alone (no fork is
// left), then kills them all and waits until they are gone (SIGKILL takes
// a moment; those still there when the agent ends would be counted as
// outliving it).
func forkUntilRefused(n int) string {
	return `mkfifo /tmp/hold; ( i=0; while [ $i -lt ` + strconv.Itoa(n) + ` ]; do read x <> /tmp/hold & i=$((i+1)); done ) 2>/dev/null || true
count() { n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; }
count; echo "procs: $n"; kill -9 -1
i=0; while count; [ $n -gt 2 ] && [ $i -lt 100 ]; do sleep 1; i=$((i+1)); done; exit 0`
}

func procsOf(t *testing.T, log string) int {
	t.Helper()
	m := procsRE.FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("the agent did not count its processes:\n%s", log)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestLimitsHold: --pids 50 and --memory 64MiB hold on this host, in the
// cgroup v2 hierarchy or, where it lacks the controller (a hybrid host), a
// cgroup v1 one: a process allocating past 64 MiB is killed, and said to
// be; forking stops at 50 processes (init's threads count too); both
// limits and where they were held are in the launch record.
func TestLimitsHold(t *testing.T) {
	e := newEnv(t)
	out := filepath.Join(e.dir, "out")
	// tail keeps the one endless line it reads in memory.
	code, log := e.run(out, `head -c 209715200 /dev/zero | tail >/dev/null && echo "tail: ok" || echo "tail: $?"
`+forkUntilRefused(200), "--pids", "50", "--memory", "64MiB")
	if code != 0 {
		t.Fatalf("run: exit %d\n%s", code, log)
	}
	sb := e.launchSandbox(out)
	if checkLimit(t, sb, "memory", 64<<20) {
		if !strings.Contains(log, "tail: 137\n") || !strings.Contains(log, "the agent reached its memory limit of 67108864 bytes: the kernel killed 1 of its processes") {
			t.Errorf("an allocation of 200 MiB under --memory 64MiB was not killed, or not said to be:\n%s", log)
		}
	}
	if checkLimit(t, sb, "pids", 50) {
		if n := procsOf(t, log); n > 50 || n < 25 {
			t.Errorf("%d processes under --pids 50", n)
		}
	}
	v1 := func(ctl string) string {
		if sb.CgroupV1[ctl] != "" {
			return " (cgroup v1)"
		}
		return ""
	}
	code, stdout, stderr := e.cli("show", "--key", e.pub, filepath.Join(out, "launch.json"))
	if want := "\nlimits: 50 processes" + v1("pids") + ", 67108864 bytes of memory" + v1("memory") + "\n"; code != 0 || !strings.Contains(stdout, want) {
		t.Errorf("show: exit %d, no line %q:\n%s%s", code, want, stdout, stderr)
	}
}

// bombMemory is what a fork bomb of nsrun.DefaultPidsMax shell processes
// needs: 920 MB measured for 4,089 of them (225 KB each, user and kernel).
const bombMemory = 2 << 30

// memAvailable is the host's MemAvailable in bytes.
func memAvailable(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^MemAvailable:\s+(\d+) kB$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no MemAvailable in /proc/meminfo:\n%s", b)
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return n << 10
}

// TestDefaultPidsLimit: with no --pids, a fork bomb ends in failed forks
// at nsrun.DefaultPidsMax processes, and the host can still start
// processes (the test goes on to run verify); --pids 0 records no limit.
// A host with less than bombMemory available (the kernel tests' guests
// have 1 GiB) is spared the bomb: there the agent forks 300 processes,
// which the default allows, and the launch record is checked.
func TestDefaultPidsLimit(t *testing.T) {
	e := newEnv(t)
	out := filepath.Join(e.dir, "out")
	bomb := memAvailable(t) >= bombMemory
	forks := nsrun.DefaultPidsMax + 1000
	if !bomb {
		forks = 300
		t.Logf("only %d MiB of memory available, %d MiB needed: no fork bomb here, %d forks", memAvailable(t)>>20, bombMemory>>20, forks)
	}
	code, log := e.run(out, forkUntilRefused(forks))
	if code != 0 {
		t.Fatalf("run: exit %d\n%s", code, log)
	}
	if n := procsOf(t, log); !bomb && n < forks {
		t.Errorf("%d processes of %d forked under the default limit of %d", n, forks, nsrun.DefaultPidsMax)
	}
	if checkLimit(t, e.launchSandbox(out), "pids", nsrun.DefaultPidsMax) && bomb {
		if n := procsOf(t, log); n > nsrun.DefaultPidsMax || n < nsrun.DefaultPidsMax-100 {
			t.Errorf("%d processes under the default limit of %d", n, nsrun.DefaultPidsMax)
		}
	}
	if code, _, stderr := e.cli("verify", "--key", e.pub, out); code != wantVerifyExit(t) {
		t.Errorf("verify after the fork bomb: exit %d, want %d: %s", code, wantVerifyExit(t), stderr)
	}
	out = filepath.Join(e.dir, "out-none")
	if code, log := e.run(out, "true", "--pids", "0"); code != 0 {
		t.Fatalf("run --pids 0: exit %d\n%s", code, log)
	}
	if sb := e.launchSandbox(out); sb.PidsMax != 0 || sb.CgroupV1["pids"] != "" || len(sb.Missing) > 0 && strings.Contains(strings.Join(sb.Missing, "\n"), "processes") {
		t.Errorf("--pids 0: launch record says pids max %d, cgroup_v1 %q, missing %q", sb.PidsMax, sb.CgroupV1, sb.Missing)
	}
	if code, _, stderr := e.cli("run", "--workspace", e.ws, "--key", e.key, "--out", filepath.Join(e.dir, "out-bad"), "--pids", "-5", "--", "true"); code != exitUsage || !strings.Contains(stderr, "--pids -5") {
		t.Errorf("--pids -5: exit %d, want %d: %s", code, exitUsage, stderr)
	}
}
