package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal"
	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
	"github.com/layerseal/layerseal/internal/oracle"
	"github.com/layerseal/layerseal/internal/privtest"
	"github.com/layerseal/layerseal/internal/treediff"
)

// socketEnv makes the test binary bind a unix socket at its one argument
// and exit: the agents' socket tool (no python or socat needed).
const socketEnv = "LAYERSEAL_TEST_SOCKET"

// deepEnv makes the test binary make N nested directories named NAME
// (args N NAME), going down with chdir, and a file "file" at the bottom:
// paths deeper than PATH_MAX, which a shell's cd refuses.
const deepEnv = "LAYERSEAL_TEST_DEEP"

func init() {
	if os.Getenv(deepEnv) == "1" && len(os.Args) == 3 {
		n, _ := strconv.Atoi(os.Args[1])
		for i := 0; i < n; i++ {
			if err := errors.Join(unix.Mkdir(os.Args[2], 0o755), unix.Chdir(os.Args[2])); err != nil {
				os.Stderr.WriteString("deep: " + err.Error() + "\n")
				os.Exit(1)
			}
		}
		if err := os.WriteFile("file", []byte("bottom\n"), 0o644); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv(socketEnv) == "1" && len(os.Args) == 2 {
		s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
		if err == nil {
			err = unix.Bind(s, &unix.SockaddrUnix{Name: os.Args[1]})
		}
		if err != nil {
			os.Stderr.WriteString("socket: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// hostile is one scripted hostile agent.
type hostile struct {
	name string
	// users the agent runs as: "root" (the default capabilities, without
	// CAP_SYS_ADMIN), "nobody" (uid 65534), "admin" (root granted
	// CAP_SYS_ADMIN through --process).
	users []string
	tree  map[string]string // workspace before the run (write's form)
	// script is run by /bin/sh -e in the workspace, with $TOOL (the test
	// binary, usable as the manifest and socket tools), $KEY, $STATE and
	// $OUT (layerseal's paths, which the agent must not reach).
	script string
	flags  []string
	// rootCaps are capabilities a root agent holds beside the defaults.
	rootCaps []string
	// codes are the incomplete codes the statement must hold, exactly.
	codes []attest.Code
	exit  int  // the agent's exit status
	view  bool // the agent writes its manifest of the merged view at the end
	// noDiff skips the comparison with the full-tree diff (trees deeper
	// than PATH_MAX, which the naive walker cannot name; runs whose apply
	// could not happen).
	noDiff bool
	// small puts the workspace and the state dir on tmpfs of these sizes
	// (MiB); 0 leaves them on the temp dir's filesystem.
	wsMiB, stateMiB int
	// kept: the run fails after the agent (exit 125) and says the change
	// set is kept.
	kept  bool
	check func(t *testing.T, r *hostileRun)
}

// hostileRun is what one run left.
type hostileRun struct {
	e         *env
	out       string
	code      int
	log       string
	statement *attest.Statement
	before    treediff.Manifest
	applied   treediff.Manifest
}

// rootWith writes a process file for a root agent with the default
// capabilities and extra ones, and returns its path.
func (e *env) rootWith(extra ...string) string {
	p := layerseal.DefaultProcess(nil, 0, 0, "host")
	caps := append(slices.Clone(layerseal.DefaultCapabilities), extra...)
	p.Capabilities = &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps}
	b, err := json.Marshal(p)
	if err == nil {
		err = os.WriteFile(filepath.Join(e.dir, "process.json"), b, 0o644)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return filepath.Join(e.dir, "process.json")
}

// keyMaterial is every spelling of the private key an agent might print.
func keyMaterial(t *testing.T, keyPath string) [][]byte {
	b, err := os.ReadFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	out := [][]byte{b}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if len(line) >= 16 && !bytes.HasPrefix(line, []byte("-----")) {
			out = append(out, line)
			if raw, err := base64.StdEncoding.DecodeString(string(line)); err == nil && len(raw) >= 32 {
				seed := raw[len(raw)-32:]
				out = append(out, seed, []byte(fmt.Sprintf("%x", seed)))
			}
		}
	}
	return out
}

func mountTmpfs(t *testing.T, dir string, mib int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%dm,mode=0755", mib)); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
}

func (h hostile) run(t *testing.T, user string) *hostileRun {
	e := newEnv(t)
	if h.wsMiB > 0 {
		mountTmpfs(t, e.ws, h.wsMiB)
	}
	if h.stateMiB > 0 {
		mountTmpfs(t, e.state, h.stateMiB)
	}
	write(t, e.ws, h.tree)
	privtest.Searchable(t, e.dir) // the unprivileged agent must reach the workspace
	// The tool, in a directory of its own the agent may read.
	tool := filepath.Join(e.dir, "bin", "tool")
	self, err := os.ReadFile(os.Args[0])
	if err == nil {
		err = os.Mkdir(filepath.Dir(tool), 0o755)
	}
	if err == nil {
		err = os.WriteFile(tool, self, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	flags := append([]string{"--ro", filepath.Dir(tool)}, h.flags...)
	switch user {
	case "nobody":
		filepath.Walk(e.ws, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, 65534, 65534) })
		flags = append(flags, "--user", "65534:65534")
	case "admin":
		flags = append(flags, "--process", e.rootWith("CAP_SYS_ADMIN"))
	case "root":
		if len(h.rootCaps) > 0 {
			flags = append(flags, "--process", e.rootWith(h.rootCaps...))
		}
	}
	before, err := treediff.Walk(e.ws)
	if err != nil {
		t.Fatal(err)
	}
	r := &hostileRun{e: e, out: filepath.Join(e.dir, "run"), before: before}
	script := h.script
	view := filepath.Join(e.dir, "view")
	if h.view {
		if err := errors.Join(os.Mkdir(view, 0o777), os.Chmod(view, 0o777)); err != nil {
			t.Fatal(err)
		}
		script += "\n\"$TOOL\" . \"$VIEW/m\""
		// The manifest leaves the agent's view through a writable path.
		flags = append(flags, "--rw", view)
	}
	for _, kv := range []string{"TOOL=" + tool, "KEY=" + e.key, "STATE=" + e.state, "OUT=" + r.out, "VIEW=" + view,
		"LAYERSEAL_TEST_MANIFEST=1", "HOME=/", "PATH=/usr/sbin:/usr/bin:/sbin:/bin"} {
		flags = append(flags, "--env", kv)
	}
	args := append([]string{"run", "--workspace", e.ws, "--key", e.key, "--out", r.out, "--state-dir", e.state}, flags...)
	args = append(args, "--", "/bin/sh", "-ec", script)
	code, stdout, stderr := e.cli(args...)
	r.code, r.log = code, stdout+stderr
	for _, k := range keyMaterial(t, e.key) {
		if bytes.Contains([]byte(r.log), k) {
			t.Fatalf("the agent printed key material: %q", k)
		}
	}
	if code != h.exit {
		t.Fatalf("run: exit %d, want %d\n%s", code, h.exit, r.log)
	}
	if h.kept && !strings.Contains(r.log, "the change set is kept in "+e.state) {
		t.Errorf("run does not say where the change set is kept:\n%s", r.log)
	}
	st, err := os.ReadFile(filepath.Join(r.out, "statement.json"))
	if err != nil {
		t.Fatalf("no statement: %v\n%s", err, r.log)
	}
	pub, err := attest.LoadPublicKey(e.pub)
	if err != nil {
		t.Fatal(err)
	}
	launch, _ := os.ReadFile(filepath.Join(r.out, "launch.json"))
	if r.statement, err = attest.VerifyStatement(st, pub, launch); err != nil {
		t.Fatalf("statement does not verify: %v", err)
	}
	var got []attest.Code
	for _, reason := range r.statement.Incomplete {
		if !slices.Contains(got, reason.Code) {
			got = append(got, reason.Code)
		}
	}
	want := slices.Clone(h.codes)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("incomplete codes %q, want %q: %+v", got, want, r.statement.Incomplete)
	}
	wantVerify := exitOK
	if len(h.codes) > 0 {
		wantVerify = exitIncomplete
	}
	if c, so, se := e.cli("verify", "--key", e.pub, "--launch", filepath.Join(r.out, "launch.json"), filepath.Join(r.out, "statement.json")); c != wantVerify {
		t.Errorf("verify: exit %d, want %d\n%s%s", c, wantVerify, so, se)
	}
	if !h.noDiff {
		// The differential check: the workspace holds, path by path,
		// what the statement says was applied.
		if c, so, se := e.cli("verify", "--key", e.pub, "--workspace", e.ws, filepath.Join(r.out, "statement.json")); c != wantVerify {
			t.Errorf("verify --workspace: exit %d, want %d\n%s%s", c, wantVerify, so, se)
		}
		if r.applied, err = treediff.Walk(e.ws); err != nil {
			t.Fatalf("walk the workspace after apply: %v", err)
		}
		if d := oracle.Compare(r.statement.Entries, treediff.Diff(before, r.applied)); len(d) > 0 {
			t.Errorf("statement vs full-tree diff of the workspace before and after apply:\n\t%s", strings.Join(d, "\n\t"))
		}
	}
	if h.view {
		view, err := treediff.ReadFile(filepath.Join(view, "m"))
		if err != nil {
			t.Fatalf("the agent's manifest: %v", err)
		}
		if d := treediff.Equal(view, r.applied); d != "" {
			t.Errorf("after apply the workspace differs from the agent's view: %s", d)
		}
	}
	if h.check != nil {
		h.check(t, r)
	}
	return r
}

// entry returns the statement's entry for p.
func (r *hostileRun) entry(t *testing.T, p string) *attest.Entry {
	t.Helper()
	for i := range r.statement.Entries {
		if string(r.statement.Entries[i].Path) == p {
			return &r.statement.Entries[i]
		}
	}
	t.Fatalf("no entry for %q", p)
	return nil
}

var hostileTree = map[string]string{
	"src/main.go": "package main\n", "src/lib/a.go": "package lib\n", "docs/readme": "r",
	"linked": "shared inode", "keep": "k",
}

// capV2 is a valid VFS_CAP_REVISION_2 security.capability value: permitted
// cap_net_bind_service.
const capV2 = "0sAAAAAgAEAAAAAAAAAAAAAAAAAAA="

// deepScript makes a chain of directories deeper than PATH_MAX, and a
// file at its end.
const deepScript = `LAYERSEAL_TEST_DEEP=1 "$TOOL" 30 "$(printf 'd%.0s' $(seq 1 200))"`

func hostileScenarios() []hostile {
	return []hostile{
		{name: "symlink-swap", users: []string{"root", "nobody"}, tree: hostileTree, view: true,
			script: `rm -rf src/lib; ln -s /etc src/lib; mv docs docs.real 2>/dev/null || cp -r docs docs.real; rm -rf docs; ln -s "$KEY" docs`,
			check: func(t *testing.T, r *hostileRun) {
				if e := r.entry(t, "src/lib"); e.Change != attest.TypeChange || e.New.Target != "/etc" {
					t.Errorf("src/lib: %+v", e)
				}
			}},
		{name: "racing-swapper", users: []string{"root", "nobody"}, tree: hostileTree, codes: []attest.Code{attest.AgentOutlived},
			script: `(while :; do mv src s2; ln -s /etc src; rm src; mv s2 src; done) >/dev/null 2>&1 &
sleep 0.2`},
		{name: "chmod-000", users: []string{"root", "nobody"}, tree: hostileTree,
			script: `mkdir -p locked/in/deep; echo secret > locked/in/deep/f; echo s > locked/g
chmod 000 locked/in/deep/f locked/in/deep locked/in locked; chmod 000 src/main.go; chmod 000 docs`},
		{name: "special-files", users: []string{"root", "nobody"}, tree: hostileTree, view: true,
			script: `mkfifo fifo; LAYERSEAL_TEST_SOCKET=1 "$TOOL" sock; ! mknod null c 1 3 2>/dev/null
rm keep; mkfifo keep`},
		{name: "odd-names", users: []string{"root", "nobody"}, tree: hostileTree, view: true,
			script: `touch "$(printf 'new\nline')" "$(printf 'bad\377\376utf8')" "$(printf '%%41 %%')" "$(printf 'x%.0s' $(seq 1 255))"
mkdir "$(printf 'dir\nwith\001ctl')"; echo n > "$(printf 'dir\nwith\001ctl')/$(printf 'y%.0s' $(seq 1 255))"`},
		// Known bug: Apply opens whole relative paths, which fail with
		// ENAMETOOLONG past PATH_MAX; the statement is right and the change
		// set is kept.
		{name: "deeper-than-PATH_MAX", users: []string{"root", "nobody"}, script: deepScript, noDiff: true,
			check: func(t *testing.T, r *hostileRun) {
				if len(r.statement.Entries) != 32 { // the root, 30 dirs, the file
					t.Fatalf("%d entries, want 32", len(r.statement.Entries))
				}
				last := r.statement.Entries[31]
				if len(last.Path) < unix.PathMax || !strings.HasSuffix(string(last.Path), "/file") || last.Change != attest.Added {
					t.Errorf("deepest entry: %d bytes, %s", len(last.Path), last.Change)
				}
				// Applied, at a depth no single path-based call can reach.
				ws, err := unix.Open(r.e.ws, unix.O_PATH|unix.O_DIRECTORY, 0)
				if err != nil {
					t.Fatal(err)
				}
				defer unix.Close(ws)
				fd, err := linux.OpenBeneath(ws, string(last.Path), unix.O_RDONLY)
				if err != nil {
					t.Fatalf("the deepest file was not applied: %v", err)
				}
				unix.Close(fd)
			}},
		{name: "sparse-1TiB", users: []string{"root"}, tree: hostileTree, flags: []string{"--digest-cap", "1MiB"},
			codes:  []attest.Code{attest.DigestCap},
			script: `truncate -s 1099511627776 huge; echo tail >> huge`, // 1 TiB; busybox has no T suffix
			noDiff: true,                                                // the naive walker would read a whole TiB
			check: func(t *testing.T, r *hostileRun) {
				if e := r.entry(t, "huge"); e.New.Size != 1<<40+5 || e.New.SHA256 != nil || len(r.statement.Entries) != 2 {
					t.Errorf("huge: size %d, digest %x; %d entries", e.New.Size, e.New.SHA256, len(r.statement.Entries))
				}
				var st unix.Stat_t
				if err := unix.Lstat(filepath.Join(r.e.ws, "huge"), &st); err != nil || st.Size != 1<<40+5 || st.Blocks > 1024 {
					t.Errorf("huge after apply: %v, size %d, %d blocks", err, st.Size, st.Blocks)
				}
			}},
		// 200 links to a new file and 50 to a lower one; 40 and 10 in -short
		// runs (the kernel matrix: each ln is a process, dear in an
		// emulated guest), still a link group far larger than any other.
		{name: "hard-link-farm", users: []string{"root", "nobody"}, tree: hostileTree, view: true,
			script: fmt.Sprintf(`mkdir farm; echo seed > farm/0; i=1; while [ $i -le %d ]; do ln farm/0 farm/$i; i=$((i+1)); done
i=0; while [ $i -lt %d ]; do ln linked lower-link-$i; i=$((i+1)); done; rm farm/7; echo changed >> farm/9`, shortOr(200, 40), shortOr(50, 10)),
			check: func(t *testing.T, r *hostileRun) {
				if e := r.entry(t, "lower-link-3"); e.New.Link != "linked" {
					t.Errorf("lower-link-3 links to %q, want \"linked\"", e.New.Link)
				}
			}},
		// With CAP_SETFCAP, no longer a default, and --allow keep: file
		// capabilities are otherwise a violation (TestGrantsReverted);
		// here the attribute's exact copy is tested.
		{name: "xattrs", users: []string{"root"}, tree: hostileTree, view: true, flags: []string{"--allow", "keep"}, rootCaps: []string{"CAP_SETFCAP"},
			script: `setfattr -n security.capability -v ` + capV2 + ` keep; setfattr -n user.note -v "$(printf 'a\nb')" src/main.go
! setfattr -n trusted.agent -v t docs/readme 2>/dev/null; setfattr -n trusted.overlay.opaque -v y src 2>/dev/null || true`},
		{name: "xattrs", users: []string{"nobody"}, tree: hostileTree, view: true,
			script: `setfattr -n user.note -v x keep; ! setfattr -n security.capability -v ` + capV2 + ` src/main.go 2>/dev/null`},
		{name: "read-key-and-state", users: []string{"root", "nobody"}, tree: hostileTree,
			script: `for f in "$KEY" "$STATE"/* "$STATE"/*/* "$STATE"/*/*/* /proc/1/root"$KEY" /proc/1/environ; do cat "$f" 2>/dev/null || true; done
ls -laR "$STATE" "$OUT" 2>/dev/null || true; ls -l /proc/1/fd 2>/dev/null || true; for fd in /proc/1/fd/*; do cat "$fd" 2>/dev/null </dev/null || true; done
grep -rl "PRIVATE KEY" / --exclude-dir=proc --exclude-dir=sys 2>/dev/null | head -5 || true
! cat "$KEY" 2>/dev/null; ! ls "$STATE/sessions" 2>/dev/null`,
		},
		// Attacks 5, 6 and 8 (filesystem half): the host is read-only but
		// for a private /tmp, no sysctl, cgroup or device node is reachable,
		// and no device node can be made.
		{name: "host-read-only", users: []string{"root", "nobody"}, tree: hostileTree,
			script: `for p in /etc/layerseal-pwned /root/layerseal-pwned /usr/local/bin/layerseal-pwned /var/layerseal-pwned; do ! touch "$p" 2>/dev/null; done
! mknod dev c 1 3 2>/dev/null; ! mknod /tmp/dev b 7 0 2>/dev/null
! sh -c 'echo "|/bin/true %p" > /proc/sys/kernel/core_pattern' 2>/dev/null
! mkdir /sys/fs/cgroup/freezer/layerseal-x 2>/dev/null; ! mkdir /sys/fs/cgroup/layerseal-x 2>/dev/null
[ -z "$(find /dev -type b)" ]; [ ! -e /dev/loop-control ]
t=$(mktemp); echo tmp > "$t"; cp "$t" from-tmp; echo done > /dev/null`,
			check: func(t *testing.T, r *hostileRun) {
				r.entry(t, "from-tmp")
				for _, p := range []string{"/etc/layerseal-pwned", "/root/layerseal-pwned", "/usr/local/bin/layerseal-pwned",
					"/var/layerseal-pwned", "/sys/fs/cgroup/freezer/layerseal-x", "/sys/fs/cgroup/layerseal-x"} {
					if _, err := os.Lstat(p); err == nil {
						os.Remove(p)
						t.Errorf("the agent made %q on the host", p)
					}
				}
			}},
		{name: "unmount-remount", users: []string{"root"}, tree: hostileTree,
			script: `! umount -l "$PWD" 2>/dev/null; ! mount -o remount,ro "$PWD" 2>/dev/null; ! mount -t tmpfs none src 2>/dev/null; echo ok > done`},
		{name: "unmount-remount", users: []string{"admin"}, tree: hostileTree,
			// Beneath the unmounted overlay lies the host's workspace
			// directory on the read-only host: the write fails (were it
			// writable, the run's paths there would be conflicts).
			codes:  []attest.Code{attest.CapSysAdmin, attest.AgentMount},
			script: `ws=$PWD; echo before > in-overlay; cd /; umount -l "$ws"; ! echo after 2>/dev/null > "$ws/under"; true`,
			noDiff: true,
			check: func(t *testing.T, r *hostileRun) {
				for _, e := range r.statement.Entries {
					if e.Path == "under" {
						t.Errorf("a write under the unmounted overlay is in the statement: %+v", e)
					}
				}
				if _, err := os.Lstat(filepath.Join(r.e.ws, "under")); err == nil {
					t.Error("the write beneath the unmounted overlay reached the real workspace")
				}
			}},
		{name: "mount-over-workspace-path", users: []string{"admin"}, tree: hostileTree,
			codes:  []attest.Code{attest.CapSysAdmin, attest.AgentMount},
			script: `mount -t tmpfs none src; echo hidden > src/x; echo seen > visible`,
			check: func(t *testing.T, r *hostileRun) {
				found := false
				for _, reason := range r.statement.Incomplete {
					found = found || reason.Code == attest.AgentMount && reason.Path == "src"
				}
				if !found {
					t.Errorf("no agent-mount at src: %+v", r.statement.Incomplete)
				}
			}},
		{name: "background-writer", users: []string{"root", "nobody"}, tree: hostileTree,
			codes: []attest.Code{attest.AgentOutlived},
			script: `(i=0; while :; do echo $i >> bg.log; i=$((i+1)); done) >/dev/null 2>&1 &
(while kill -0 $$ 2>/dev/null; do sleep 0.01; done; sleep 1; echo late > late.txt) >/dev/null 2>&1 &
sleep 0.1; echo main > main.txt`,
			check: func(t *testing.T, r *hostileRun) {
				r.entry(t, "main.txt")
				if _, err := os.Stat(filepath.Join(r.e.ws, "late.txt")); err == nil {
					t.Errorf("late.txt written a second after the main process ended, by a process that should have been killed")
				}
			}},
		// The agent fills the state dir's filesystem (no reserve keeps it
		// from it): the statement still goes to the output dir; the apply
		// cannot journal, so it applies nothing, keeps the change set and
		// says how to resume.
		{name: "fill-the-disk", users: []string{"root", "nobody"}, tree: hostileTree, wsMiB: 32, stateMiB: 4, flags: []string{"--min-free", "0"},
			script: `dd if=/dev/zero of=big bs=64k count=200 2>/dev/null || echo ENOSPC; echo after > after.txt || true`,
			exit:   exitSetup, kept: true, noDiff: true,
			check: func(t *testing.T, r *hostileRun) {
				if !strings.Contains(r.log, "layerseal apply "+r.out) {
					t.Errorf("the error does not say how to resume:\n%s", r.log)
				}
				ups, _ := filepath.Glob(filepath.Join(r.e.state, "sessions", "*", "upper", "big"))
				if len(ups) != 1 {
					t.Fatalf("the upper layer holding big is not kept: %q", ups)
				}
				if fi, err := os.Stat(ups[0]); err != nil || fi.Size() == 0 || fi.Size() >= 200*64<<10 {
					t.Errorf("kept big: %v: the small state dir did not fill", err)
				}
			}},
	}
}

// TestHostileAgents runs every scripted hostile agent as each of its users
// and checks the statement against the full-tree diff, the incomplete
// codes, verify's exit code, and that no key material was printed.
func TestHostileAgents(t *testing.T) {
	privtest.Require(t)
	for _, h := range hostileScenarios() {
		for _, u := range h.users {
			t.Run(h.name+"/"+u, func(t *testing.T) {
				start := time.Now()
				h.run(t, u)
				t.Logf("%v", time.Since(start).Round(time.Millisecond))
			})
		}
	}
}

// TestHostileManyFiles: an agent makes 200,000 files (workspace and state
// dir on tmpfs, to keep the run short); 3,000 in -short runs (the kernel
// matrix, whose guests are emulated), which CI's host run does not use:
// still one directory that takes several 32 KiB getdents buffers to list.
func TestHostileManyFiles(t *testing.T) {
	privtest.Require(t)
	n := shortOr(200_000, 3_000)
	h := hostile{name: "many-files", wsMiB: 2048, stateMiB: 2048,
		script: fmt.Sprintf(`mkdir many; cd many; seq 1 %d | xargs touch`, n),
		check: func(t *testing.T, r *hostileRun) {
			if got := len(r.statement.Entries); got != n+2 { // the root, the dir, the files
				t.Errorf("%d entries, want %d", got, n+2)
			}
		}}
	start := time.Now()
	h.run(t, "root")
	t.Logf("%d files: %v", n, time.Since(start).Round(time.Millisecond))
}

// shortOr is long, or short in -short runs.
func shortOr(long, short int) int {
	if testing.Short() {
		return short
	}
	return long
}
