package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// connectEach connects to the unix socket at each path and prints
// "connected PATH" or "refused PATH": the agents' socket client.
func connectEach(paths []string) int {
	for _, p := range paths {
		if c, err := net.Dial("unix", p); err == nil {
			c.Close()
			fmt.Println("connected", p)
		} else {
			fmt.Println("refused", p)
		}
	}
	return 0
}

// testBinaryRO gives the agent the directory of the test binary, its
// socket client, read-only.
func testBinaryRO() []string { return []string{"--ro", filepath.Dir(os.Args[0])} }

// listen listens on a unix socket at path until the test ends.
func listen(t *testing.T, path string) {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(); os.Remove(path) })
}

// hostSecrets puts what a root agent must not reach where the host keeps
// such things: a file under /root/.ssh, a file in the host's /tmp, a file
// and a unix socket under /var/lib (with the state dir, where the host
// has a /var/lib: a kernel-test guest has none), and a unix socket in
// /root. It returns the files, the sockets and the state dir to use.
func hostSecrets(t *testing.T, e *env) (files, socks []string, state string) {
	t.Helper()
	tag := fmt.Sprintf("layerseal-view-test-%d-%s", os.Getpid(), filepath.Base(e.dir))
	if _, err := os.Stat("/root/.ssh"); os.IsNotExist(err) {
		if err := os.MkdirAll("/root/.ssh", 0o700); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove("/root/.ssh") })
	}
	for _, p := range []string{"/root/.ssh/" + tag, "/tmp/" + tag} {
		if err := os.WriteFile(p, []byte("SECRET\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(p) })
		files = append(files, p)
	}
	socks = []string{"/root/" + tag + ".sock"}
	state = e.state
	if fi, err := os.Stat("/var/lib"); err == nil && fi.IsDir() {
		vl, err := os.MkdirTemp("/var/lib", "layerseal-view-test-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(vl) })
		if err := os.WriteFile(filepath.Join(vl, "secret"), []byte("SECRET\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.Join(vl, "secret"))
		socks = append(socks, filepath.Join(vl, "sock"))
		state = filepath.Join(vl, "state")
	} else {
		t.Logf("no /var/lib here (%v): nothing is put there", err)
	}
	for _, s := range socks {
		listen(t, s)
	}
	return files, socks, state
}

// probeScript prints what the agent could reach of files and socks, and
// what the view gives it.
func probeScript(files, socks []string, ro string) string {
	return `for p in /etc/shadow ` + strings.Join(files, " ") + `; do [ -n "$(head -c 1 "$p" 2>/dev/null)" ] && echo "read $p"; done
for d in /var/lib /root/.ssh /home /srv; do [ -n "$(ls -A "$d" 2>/dev/null)" ] && echo "listed $d"; done
` + connectEnv + `=1 "$BIN" ` + strings.Join(socks, " ") + `
[ -n "$(head -c 1 /bin/sh)" ] && echo "read /bin/sh"
grep -q '^root:' /etc/passwd && echo "read /etc/passwd"
echo h > "$HOME/f" && [ "$(cat "$HOME/f")" = h ] && echo "home $(stat -c '%u %a' "$HOME")"
echo t > /tmp/f && [ "$(cat /tmp/f)" = t ] && echo "tmp $(stat -c '%a' /tmp)"
echo x 2>/dev/null > /layerseal-pwned || echo "root refused"
cat ` + ro + `/data
echo x 2>/dev/null > ` + ro + `/new || echo "ro refused"
rm ` + ro + `/data 2>/dev/null || echo "ro kept"
exit 0`
}

// TestViewMinimal: on the defaults, a root agent sees the system's
// programs and /etc (not its secrets), an empty home and /tmp of its own,
// and what ro: and --ro name, read-only; nothing else of the host: not
// /etc/shadow, a file under /root/.ssh or the host's /tmp, anything under
// /var/lib (the state dir is there), nor a host unix socket under /var/lib
// or /root. The launch record and show say so. One run.
func TestViewMinimal(t *testing.T) {
	e := newEnv(t)
	files, socks, state := hostSecrets(t, e)
	ro := filepath.Join(e.dir, "ro")
	write(t, ro, map[string]string{"data": "ro-data\n"})
	write(t, e.ws, map[string]string{"layerseal.yaml": "ro: [" + ro + "]\n"})
	if b, err := os.ReadFile("/etc/shadow"); err != nil || len(b) == 0 {
		t.Logf("this host's /etc/shadow is empty or missing (%v): its check is vacuous here", err)
	}
	out := filepath.Join(e.dir, "out")
	args := append([]string{"run", "--workspace", e.ws, "--key", e.key, "--out", out, "--state-dir", state, "--env", "BIN=" + os.Args[0]},
		testBinaryRO()...)
	code, stdout, stderr := e.cli(append(args, "--", "/bin/sh", "-c", probeScript(files, socks, ro))...)
	if code != 0 {
		t.Fatalf("run: exit %d\n%s%s", code, stdout, stderr)
	}
	want := ""
	for _, s := range socks {
		want += "refused " + s + "\n"
	}
	want += "read /bin/sh\nread /etc/passwd\nhome 0 700\ntmp 1777\nroot refused\nro-data\nro refused\nro kept\n"
	if stdout != want {
		t.Errorf("the agent printed\n%s\nwant\n%s", stdout, want)
	}
	if b, err := os.ReadFile(filepath.Join(ro, "data")); err != nil || string(b) != "ro-data\n" {
		t.Errorf("the read-only path's file on the host: %q, %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(ro, "new")); !os.IsNotExist(err) {
		t.Errorf("the agent made a file in the read-only path: %v", err)
	}
	if strings.Contains(stderr, "whole host") {
		t.Errorf("run warned of the host view:\n%s", stderr)
	}
	sb := e.launchSandbox(out)
	if sb.View != "minimal" || !slices.Contains(sb.ReadOnly, "/etc") || !slices.Contains(sb.ReadOnly, ro) ||
		!slices.Contains(sb.ReadOnly, filepath.Dir(os.Args[0])) || slices.Contains(sb.ReadOnly, "/root") || !sb.ReadOnlyHost {
		t.Errorf("launch record: view %q, read-only %q, read_only_host %v", sb.View, sb.ReadOnly, sb.ReadOnlyHost)
	}
	c, so, se := e.cli("show", "--key", e.pub, filepath.Join(out, "launch.json"))
	if c != 0 || !strings.Contains(so, "view: minimal; read-only from the host: ") || strings.Contains(so, "warning") {
		t.Errorf("show of the launch record: exit %d:\n%s%s", c, so, se)
	}
	if c, so, se := e.cli("show", out); c != 0 || strings.Contains(so, "whole host") {
		t.Errorf("show of the run: exit %d:\n%s%s", c, so, se)
	}
}

// TestViewHost: --view host gives the agent the whole host read-only as
// before views: it reads /etc/shadow, /root/.ssh and /var/lib, and
// connects to the host's unix sockets there. The launch
// record says "host"; run and show warn.
func TestViewHost(t *testing.T) {
	e := newEnv(t)
	files, socks, state := hostSecrets(t, e)
	// The host view's /tmp is the host's under a layer of the agent's own,
	// or empty where the kernel refuses that overlay: not asked here.
	files = slices.DeleteFunc(files, func(f string) bool { return strings.HasPrefix(f, "/tmp/") })
	out := filepath.Join(e.dir, "out")
	script := `for p in /etc/shadow ` + strings.Join(files, " ") + `; do [ -n "$(head -c 1 "$p" 2>/dev/null)" ] && echo "read $p"; done
` + connectEnv + `=1 "$BIN" ` + strings.Join(socks, " ")
	code, stdout, stderr := e.cli("run", "--workspace", e.ws, "--key", e.key, "--out", out, "--state-dir", state, "--view", "host",
		"--env", "BIN="+os.Args[0], "--", "/bin/sh", "-c", script)
	if code != 0 {
		t.Fatalf("run: exit %d\n%s%s", code, stdout, stderr)
	}
	want := ""
	if b, err := os.ReadFile("/etc/shadow"); err == nil && len(b) > 0 {
		want += "read /etc/shadow\n"
	}
	for _, f := range files {
		want += "read " + f + "\n"
	}
	for _, s := range socks {
		want += "connected " + s + "\n"
	}
	if stdout != want {
		t.Errorf("the agent printed\n%s\nwant\n%s", stdout, want)
	}
	if !strings.Contains(stderr, "layerseal: warning: the agent sees the whole host read-only (view host)") {
		t.Errorf("run did not warn of the host view:\n%s", stderr)
	}
	if sb := e.launchSandbox(out); sb.View != "host" || sb.ReadOnly != nil || !sb.ReadOnlyHost {
		t.Errorf("launch record: view %q, read-only %q, read_only_host %v", sb.View, sb.ReadOnly, sb.ReadOnlyHost)
	}
	c, so, se := e.cli("show", "--key", e.pub, filepath.Join(out, "launch.json"))
	if c != 0 || !strings.Contains(so, "\nwarning: the agent saw the whole host read-only (view host)") {
		t.Errorf("show of the launch record: exit %d, no warning:\n%s%s", c, so, se)
	}
	if c, so, se := e.cli("show", out); c != 0 || !strings.Contains(so, "\n# warning: the agent saw the whole host read-only (view host)") {
		t.Errorf("show of the run: exit %d, no warning:\n%s%s", c, so, se)
	}
}

// TestViewRefusesBadInput: a --ro or --view value that cannot be used is
// refused before anything starts, naming it.
func TestViewRefusesBadInput(t *testing.T) {
	e := newEnv(t)
	out := filepath.Join(e.dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--ro", filepath.Join(e.dir, "nope")}, exitSetup, `"` + filepath.Join(e.dir, "nope") + `" does not exist`},
		{[]string{"--ro", e.state}, exitSetup, `"` + e.state + `" overlaps layerseal's state dir`},
		{[]string{"--ro", e.key}, exitSetup, `"` + e.key + `" overlaps layerseal's key`},
		{[]string{"--ro", out}, exitSetup, `"` + out + `" overlaps layerseal's output dir`},
		{[]string{"--ro", e.dir}, exitSetup, `"` + e.dir + `" overlaps layerseal's`},
		{[]string{"--ro", "/proc/sys"}, exitSetup, `"/proc/sys" lies under /proc`},
		{[]string{"--ro", e.ws}, exitSetup, `"` + e.ws + `" is the workspace`},
		{[]string{"--ro", ""}, exitUsage, `--ro "": not a path`},
		{[]string{"--view", "all"}, exitUsage, `--view "all": want minimal or host`},
	} {
		if err := os.MkdirAll(e.state, 0o700); err != nil {
			t.Fatal(err)
		}
		args := append([]string{"run", "--workspace", e.ws, "--key", e.key, "--out", out, "--state-dir", e.state}, c.args...)
		code, stdout, stderr := e.cli(append(args, "--", "/bin/sh", "-c", "echo ran > ran")...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: exit %d, want %d and %q:\n%s%s", c.args, code, c.code, c.want, stdout, stderr)
		}
		if _, err := os.Lstat(filepath.Join(out, "launch.json")); err == nil {
			t.Fatalf("%q: a launch record was written", c.args)
		}
	}
}
