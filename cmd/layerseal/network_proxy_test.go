package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/layerseal/layerseal/attest"
)

// fetchEnv makes the test binary, run as the agent, fetch each URL it is
// given as an argument: "direct" ones by connecting to their host:port
// itself, the others through the proxy $HTTP_PROXY names. It prints one
// line per URL, "URL ok BODY" or "URL err STATUS-OR-ERROR".
const fetchEnv = "LAYERSEAL_TEST_FETCH"

func init() {
	if os.Getenv(fetchEnv) != "1" {
		return
	}
	for _, arg := range os.Args[1:] {
		u, direct := strings.CutPrefix(arg, "direct:")
		tr := &http.Transport{}
		if !direct {
			p, err := url.Parse(os.Getenv("HTTP_PROXY"))
			if err != nil || os.Getenv("HTTP_PROXY") == "" {
				fmt.Printf("%s err no HTTP_PROXY\n", arg)
				continue
			}
			tr.Proxy = http.ProxyURL(p)
		}
		c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		resp, err := c.Get(u)
		if err != nil {
			fmt.Printf("%s err %v\n", arg, err)
			continue
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		resp.Body.Close()
		if resp.StatusCode != 200 {
			fmt.Printf("%s err %d\n", arg, resp.StatusCode)
			continue
		}
		fmt.Printf("%s ok %s\n", arg, body)
	}
	os.Exit(0)
}

// hostServer serves "hello from the host" on 127.0.0.1 of the host.
func hostServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "hello from the host")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// TestRunNetworkDefaultNone: on the default network an agent cannot reach
// a service on the host's loopback interface, and the launch record says
// "none"; --network host reaches it and warns, in run and in show.
func TestRunNetworkDefaultNone(t *testing.T) {
	e := newEnv(t)
	addr := hostServer(t)
	for _, network := range []string{"", "host"} {
		out := filepath.Join(e.dir, "out-"+network)
		extra := append([]string{"--env", fetchEnv + "=1", "--env", "TOOL=" + os.Args[0]}, testBinaryRO()...)
		if network != "" {
			extra = append(extra, "--network", network)
		}
		code, text := e.run(out, `"$TOOL" direct:http://`+addr+`/`, extra...)
		if code != 0 {
			t.Fatalf("--network %q: exit %d: %s", network, code, text)
		}
		reached := strings.Contains(text, "ok hello from the host")
		warned := strings.Contains(text, "warning: --network host: the agent could reach the host's network")
		if reached != (network == "host") || warned != (network == "host") {
			t.Errorf("--network %q: reached the host's loopback %v, warned %v:\n%s", network, reached, warned, text)
		}
		show := e.cliCheck(0, "show", filepath.Join(out, "launch.json"))
		want := "sandbox: network " + map[string]string{"": "none", "host": "host"}[network]
		if !strings.Contains(show, want) || strings.Contains(show, "warning: --network host") != (network == "host") {
			t.Errorf("--network %q: show of the launch record:\n%s", network, show)
		}
		show = e.cliCheck(0, "show", out)
		if strings.Contains(show, "warning: --network host") != (network == "host") {
			t.Errorf("--network %q: show of the statement:\n%s", network, show)
		}
	}
}

// TestRunAllowNetRefused: malformed --allow-net values, and an allow list
// with --network none or host, are refused before anything starts, naming
// them.
func TestRunAllowNetRefused(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--allow-net", "example.com:99999"}, `--allow-net: allowed destination "example.com:99999"`},
		{[]string{"--allow-net", "*"}, `allowed destination "*"`},
		{[]string{"--allow-net", ""}, `allowed destination ""`},
		{[]string{"--allow-net", "example.com", "--network", "host"}, "--network host with --allow-net example.com"},
		{[]string{"--network", "none", "--allow-net", "127.0.0.1:8080"}, "--network none with --allow-net 127.0.0.1:8080"},
		{[]string{"--network", "bridge"}, `"bridge"`},
	} {
		out := filepath.Join(e.dir, "out")
		code, text := e.run(out, "echo ran > ran.txt", c.args...)
		if code != exitUsage || !strings.Contains(text, c.want) {
			t.Errorf("%q: exit %d, want %d and %q:\n%s", c.args, code, exitUsage, c.want, text)
		}
		if _, err := os.Stat(filepath.Join(out, "launch.json")); err == nil {
			t.Errorf("%q: a launch record was written", c.args)
		}
	}
	// The config's list with --network host is refused, naming both.
	write(t, e.ws, map[string]string{"layerseal.yaml": "network: {allow: [example.com]}\n"})
	code, text := e.run(filepath.Join(e.dir, "out2"), "true", "--network", "host")
	if code != exitUsage || !strings.Contains(text, "--network host with network: allow in the config") {
		t.Errorf("config allow list with --network host: exit %d:\n%s", code, text)
	}
	write(t, e.ws, map[string]string{"layerseal.yaml": "network: {allow: [\"a.example:0\"]}\n"})
	code, text = e.run(filepath.Join(e.dir, "out3"), "true")
	if code != exitUsage || !strings.Contains(text, `line 1: network allow: allowed destination "a.example:0"`) {
		t.Errorf("config with a bad allow entry: exit %d:\n%s", code, text)
	}
}

// TestRunAllowNetProxy: with --allow-net 127.0.0.1:PORT the agent fetches
// from a host HTTP server through the proxy, and a second, disallowed
// host:port is refused; both attempts are in the signed statement, the
// checkpoint taken between them holds the first, verify passes, and a
// re-signed statement that drops a record fails verify against the chain.
func TestRunAllowNetProxy(t *testing.T) {
	e := newEnv(t)
	allowed, other := hostServer(t), hostServer(t)
	out := filepath.Join(e.dir, "run")
	sync := filepath.Join(e.dir, "sync")
	if err := os.Mkdir(sync, 0o777); err != nil {
		t.Fatal(err)
	}
	script := strings.ReplaceAll(`"$TOOL" http://`+allowed+`/ > SYNC/first; touch SYNC/ready1
while [ ! -e SYNC/go1 ]; do sleep 0.05; done
"$TOOL" http://`+other+`/ direct:http://`+allowed+`/ > SYNC/second
"$TOOL" $(i=0; while [ $i -lt 24 ]; do echo http://`+other+`/; i=$((i+1)); done) > /dev/null
env | grep -i _proxy= | sort > SYNC/env`, "SYNC", sync)
	run, log := e.startRun(out, script, append([]string{"--rw", sync, "--allow-net", allowed,
		"--env", fetchEnv + "=1", "--env", "TOOL=" + os.Args[0]}, testBinaryRO()...)...)
	waitFor(t, filepath.Join(sync, "ready1"))
	if code, stdout, stderr := e.cli("checkpoint", "--state-dir", e.state, out); code != 0 {
		t.Fatalf("checkpoint: exit %d: %s%s", code, stdout, stderr)
	}
	os.WriteFile(filepath.Join(sync, "go1"), nil, 0o644)
	if err := run.Wait(); err != nil {
		t.Fatalf("run: %v\n%s", err, log)
	}
	first, _ := os.ReadFile(filepath.Join(sync, "first"))
	second, _ := os.ReadFile(filepath.Join(sync, "second"))
	env, _ := os.ReadFile(filepath.Join(sync, "env"))
	if !strings.Contains(string(first), "ok hello from the host") {
		t.Errorf("the allowed fetch through the proxy: %q\n%s", first, log)
	}
	if !strings.Contains(string(second), "http://"+other+"/ err 403") || !strings.Contains(string(second), "direct:http://"+allowed+"/ err") {
		t.Errorf("the disallowed fetch, and the direct one: %q", second)
	}
	for _, v := range []string{"HTTP_PROXY=http://127.0.0.1:", "https_proxy=http://127.0.0.1:", "ALL_PROXY=socks5h://127.0.0.1:", "no_proxy=::1"} {
		if !strings.Contains(string(env), v) {
			t.Errorf("the agent's environment lacks %s:\n%s", v, env)
		}
	}
	if !strings.Contains(log.String(), "layerseal: egress refused: "+other+" (port not allowed)") {
		t.Errorf("no refusal on the run's output:\n%s", log)
	}
	// 25 refusals: 20 lines, then one that says there are more.
	if n := strings.Count(log.String(), "layerseal: egress refused: "); n != 21 || !strings.Contains(log.String(), "egress refused: more connections than the 20 above") {
		t.Errorf("%d refusal lines for 25 refusals, want 20 and one that says there are more:\n%s", n, log)
	}

	var shown struct {
		Egress []struct {
			Host        string `json:"host"`
			Port        uint16 `json:"port"`
			Allowed     bool   `json:"allowed"`
			Reason      string `json:"reason"`
			Received    uint64 `json:"received"`
			Connections uint64 `json:"connections"`
		} `json:"egress"`
	}
	if err := json.Unmarshal([]byte(e.cliCheck(0, "show", "--json", "--key", e.pub, out)), &shown); err != nil {
		t.Fatal(err)
	}
	var sawAllowed bool
	var refused uint64
	for _, r := range shown.Egress {
		hp := net.JoinHostPort(r.Host, fmt.Sprint(r.Port))
		sawAllowed = sawAllowed || hp == allowed && r.Allowed && r.Received > 0
		if hp == other && !r.Allowed && r.Reason == "port not allowed" {
			refused += r.Connections
		}
	}
	sawRefused := refused == 25
	if !sawAllowed || !sawRefused {
		t.Errorf("statement egress: %+v", shown.Egress)
	}
	if got := e.cliCheck(0, "show", out); !strings.Contains(got, "refused") || !strings.Contains(got, allowed) {
		t.Errorf("show:\n%s", got)
	}
	if got := e.cliCheck(0, "show", filepath.Join(out, "checkpoints", "000001.json")); !strings.Contains(got, "egress: 1 record(s)") {
		t.Errorf("show checkpoint 1:\n%s", got)
	}
	cp := e.cliCheck(0, "show", "--json", filepath.Join(out, "checkpoints", "000001.json"))
	if !strings.Contains(cp, `"host":"127.0.0.1"`) || strings.Contains(cp, fmt.Sprint(other[strings.LastIndexByte(other, ':')+1:])+`,"protocol"`) {
		t.Errorf("checkpoint 1 egress: %s", cp)
	}
	e.cliCheck(wantVerifyExit(t), "verify", "--key", e.pub, out)
	launch := e.cliCheck(0, "show", filepath.Join(out, "launch.json"))
	if !strings.Contains(launch, "sandbox: network proxy") || !strings.Contains(launch, "network allowed: "+allowed) {
		t.Errorf("show launch:\n%s", launch)
	}

	// The statement re-signed with the operator's key, without the
	// allowed connection or with its bytes shrunk, fails against the
	// checkpoint that recorded it.
	signer, err := attest.LoadPrivateKey(e.key)
	if err != nil {
		t.Fatal(err)
	}
	stEnv, err := os.ReadFile(filepath.Join(out, "statement.json"))
	if err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func([]attest.Egress) []attest.Egress{
		"allowed record dropped": func(es []attest.Egress) []attest.Egress {
			return slices.DeleteFunc(es, func(r attest.Egress) bool { return r.Allowed })
		},
		"bytes shrunk": func(es []attest.Egress) []attest.Egress {
			for i := range es {
				if es[i].Allowed {
					es[i].Received = 0
				}
			}
			return es
		},
	} {
		st, err := attest.ReadStatement(stEnv)
		if err != nil {
			t.Fatal(err)
		}
		st.Egress = edit(st.Egress)
		forged, err := attest.SignStatement(signer, st)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(e.dir, "forged-"+strings.ReplaceAll(name, " ", "-"))
		if err := os.CopyFS(dir, os.DirFS(out)); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "statement.json"), forged, 0o644); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := e.cli("verify", "--key", e.pub, filepath.Join(dir, "statement.json"))
		if code != exitFailed || !strings.Contains(stderr, "egress") {
			t.Errorf("%s: verify exit %d, want %d naming the egress records:\n%s%s", name, code, exitFailed, stdout, stderr)
		}
	}
}
