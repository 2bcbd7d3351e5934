package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/layerseal/layerseal"
)

// agentGitFn is git as an agent runs it: its own identity, no signing.
const agentGitFn = `G() { git -c safe.directory='*' -c user.name='Agent Smith' -c user.email=agent@example.com -c commit.gpgsign=false -c gc.auto=0 "$@"; }
`

// gitBranchEnv is a workspace that is a git repository with one commit,
// and a staged session whose agent ran script; it returns the session's
// output dir and the dir the agent could write its notes to.
func gitBranchEnv(t *testing.T, name, script string, initArgs ...string) (*env, string, string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is needed for this test: %v", err)
	}
	e := newEnv(t)
	write(t, e.ws, map[string]string{"a.txt": "a\n", "b.txt": "b\n"})
	gitIn(t, e.ws, append([]string{"init", "-q"}, initArgs...)...)
	// The owner's identity, which the layerseal commit takes: no global
	// git config is needed (the kernel-test guests have none).
	gitIn(t, e.ws, "config", "user.name", "Owner")
	gitIn(t, e.ws, "config", "user.email", "owner@example.com")
	gitIn(t, e.ws, "add", "-A")
	gitIn(t, e.ws, "commit", "-qm", "base")
	notes := filepath.Join(e.dir, name+".view")
	out, _ := e.stagedRun(name, agentGitFn+strings.ReplaceAll(script, "NOTES", notes))
	return e, out, notes
}

// twoCommits: the agent commits twice with its own identity and dates,
// then leaves an edit uncommitted and a file untracked.
const twoCommits = `echo one > a.txt; G add a.txt
GIT_AUTHOR_DATE='1000000000 +0200' GIT_COMMITTER_DATE='1000000100 +0200' G commit -qm 'agent: first'
echo new > n.txt; G add n.txt
GIT_AUTHOR_DATE='1100000000 -0500' GIT_COMMITTER_DATE='1100000100 -0500' G commit -qm 'agent: second' -m 'with a body'
echo uncommitted > b.txt; echo u > untracked.txt
G log -2 --format='%H %an <%ae> %ad %cd %s' --date=raw > NOTES/log
`

// TestApplyGitBranchAgentCommits: the agent's commits become the branch's
// history as it made them (messages, authors, dates, ids), with one
// commit of what it left uncommitted on top; the workspace's HEAD, index
// and working tree stay as they were; the session is on the branch in
// sessions, show and verify --workspace (exit 3); a later apply applies
// the change set without conflicts at what --git-branch wrote, and a
// discard drops the staged copy, each saying where the branch is.
func TestApplyGitBranchAgentCommits(t *testing.T) {
	e, out, notes := gitBranchEnv(t, "s", twoCommits)
	base := strings.TrimSpace(gitIn(t, e.ws, "rev-parse", "HEAD"))
	before := repoState(t, e.ws)
	agentLog, err := os.ReadFile(filepath.Join(notes, "log"))
	if err != nil {
		t.Fatal(err)
	}
	msg := e.mustCLI(0, "apply", "--state-dir", e.state, "--git-branch", "agent", out)
	if !strings.Contains(msg, "holds the agent's 2 commit(s) as it made them") {
		t.Errorf("apply --git-branch says:\n%s", msg)
	}
	got := gitIn(t, e.ws, "log", "--format=%H %an <%ae> %ad %cd %s", "--date=raw", "agent")
	lines := strings.SplitAfter(got, "\n")
	if len(lines) != 5 || !strings.Contains(lines[0], "layerseal: session ") || strings.Join(lines[1:3], "") != string(agentLog) || !strings.HasPrefix(lines[3], base+" ") {
		t.Fatalf("git log agent:\n%s\nwant the layerseal commit, then the agent's:\n%s\nthen %s", got, agentLog, base)
	}
	if body := gitIn(t, e.ws, "log", "-1", "--format=%B", "agent~1"); body != "agent: second\n\nwith a body\n\n" {
		t.Errorf("the agent's message on the branch: %q", body)
	}
	tip := gitIn(t, e.ws, "log", "-1", "--format=%B", "agent")
	if !strings.Contains(tip, "Layerseal-Statement: sha256:") || !strings.Contains(tip, "Layerseal-Session: ") {
		t.Errorf("the layerseal commit's message:\n%s", tip)
	}
	if d := gitIn(t, e.ws, "diff", "--name-status", "agent~1", "agent"); d != "M\tb.txt\nA\tuntracked.txt\n" {
		t.Errorf("the layerseal commit holds:\n%s", d)
	}
	if after := repoState(t, e.ws); strings.Replace(after, gitIn(t, e.ws, "for-each-ref", "refs/heads/agent"), "", 1) != before {
		t.Errorf("--git-branch changed more than the new branch:\n%s\n---\n%s", before, after)
	}
	if s := e.mustCLI(0, "sessions", "--state-dir", e.state); !strings.Contains(s, "branch agent") || strings.Contains(s, "applied") {
		t.Errorf("sessions after --git-branch:\n%s", s)
	}
	var list []layerseal.SessionInfo
	if err := json.Unmarshal([]byte(e.mustCLI(0, "sessions", "--json", "--state-dir", e.state)), &list); err != nil || len(list) != 1 || list[0].State != layerseal.StateBranch || list[0].GitBranch != "refs/heads/agent" {
		t.Errorf("sessions --json after --git-branch: %+v (%v)", list, err)
	}
	if s := e.mustCLI(0, "show", "--state-dir", e.state, out); !strings.Contains(s, "branch agent (commit ") {
		t.Errorf("show after --git-branch:\n%s", s)
	}
	if s := e.mustCLI(3, "verify", "--key", e.pub, "--state-dir", e.state, "--workspace", e.ws, filepath.Join(out, "statement.json")); !strings.Contains(s, "went to git branch agent") {
		t.Errorf("verify --workspace after --git-branch:\n%s", s)
	}
	if s := e.mustCLI(0, "apply", "--state-dir", e.state, out); !strings.Contains(s, "written to git branch agent") {
		t.Errorf("apply after --git-branch:\n%s", s)
	}
	// The whole change set: the agent's commits on main, its edits in the
	// working tree.
	if h := gitIn(t, e.ws, "rev-parse", "main"); h != gitIn(t, e.ws, "rev-parse", "agent~1") {
		t.Errorf("main after apply is %s", h)
	}
	if st := gitIn(t, e.ws, "--no-optional-locks", "status", "--porcelain"); st != " M b.txt\n?? untracked.txt\n" {
		t.Errorf("git status after apply:\n%s", st)
	}
	e.mustCLI(wantVerifyExit(t), "verify", "--key", e.pub, "--state-dir", e.state, "--workspace", e.ws, filepath.Join(out, "statement.json"))

	d, dout, _ := gitBranchEnv(t, "d", twoCommits)
	d.mustCLI(0, "apply", "--state-dir", d.state, "--git-branch", "agent", dout)
	if s := d.mustCLI(0, "discard", "--state-dir", d.state, dout); !strings.Contains(s, "written to git branch agent") {
		t.Errorf("discard after --git-branch:\n%s", s)
	}
	if n := gitIn(t, d.ws, "rev-list", "--count", "agent"); n != "4\n" {
		t.Errorf("the branch after discard holds %s commits", n)
	}
}

// TestApplyGitBranchPacked: an agent whose git packed its objects (git
// gc, with deltas between versions of a file) gets its commits on the
// branch as it made them, read from its pack.
func TestApplyGitBranchPacked(t *testing.T) {
	e, out, notes := gitBranchEnv(t, "s", `seq 1 3000 > big.txt; G add big.txt; G commit -qm 'agent: big'
sed -i 's/^1500$/fifteen hundred/' big.txt; G commit -qam 'agent: edit'
G gc -q --aggressive; ls .git/objects/pack/*.pack >/dev/null
echo u > untracked.txt
G log -2 --format='%H %an <%ae> %ad %cd %s' --date=raw > NOTES/log
G verify-pack -v .git/objects/pack/*.idx > NOTES/verify-pack
`)
	agentLog, err := os.ReadFile(filepath.Join(notes, "log"))
	if err != nil {
		t.Fatal(err)
	}
	if vp, _ := os.ReadFile(filepath.Join(notes, "verify-pack")); !strings.Contains(string(vp), "chain length = 1") {
		t.Fatalf("the agent's pack holds no delta:\n%s", vp)
	}
	e.mustCLI(0, "apply", "--state-dir", e.state, "--git-branch", "agent", out)
	got := gitIn(t, e.ws, "log", "--format=%H %an <%ae> %ad %cd %s", "--date=raw", "agent")
	if lines := strings.SplitAfter(got, "\n"); len(lines) != 5 || strings.Join(lines[1:3], "") != string(agentLog) {
		t.Fatalf("git log agent:\n%s\nwant the layerseal commit, then the agent's:\n%s", got, agentLog)
	}
	if b := gitIn(t, e.ws, "show", "agent:big.txt"); !strings.Contains(b, "\nfifteen hundred\n1501\n") {
		t.Errorf("big.txt on the branch is not the agent's")
	}
	gitIn(t, e.ws, "fsck", "--strict")
}

// TestApplyGitBranchSHA256: in a repository of SHA-256 object ids, the
// agent's commits, loose and packed, keep their ids too.
func TestApplyGitBranchSHA256(t *testing.T) {
	for _, gc := range []string{"", "G gc -q\n"} {
		e, out, notes := gitBranchEnv(t, "s", twoCommits+gc+"G log -2 --format='%H %an <%ae> %ad %cd %s' --date=raw > NOTES/log\n", "--object-format=sha256")
		agentLog, err := os.ReadFile(filepath.Join(notes, "log"))
		if err != nil {
			t.Fatal(err)
		}
		e.mustCLI(0, "apply", "--state-dir", e.state, "--git-branch", "agent", out)
		got := gitIn(t, e.ws, "log", "--format=%H %an <%ae> %ad %cd %s", "--date=raw", "agent")
		if lines := strings.SplitAfter(got, "\n"); len(lines) != 5 || len(strings.Fields(lines[1])[0]) != 64 || strings.Join(lines[1:3], "") != string(agentLog) {
			t.Errorf("git log agent (gc %q):\n%s\nwant the layerseal commit, then the agent's:\n%s", gc, got, agentLog)
		}
		gitIn(t, e.ws, "fsck", "--strict")
	}
}

// TestApplyGitBranchHostileHistory: an agent's history that cannot be
// taken over as it is (a corrupt object, a parent in neither the session
// nor the workspace, packed objects, too long a history) is refused with
// nothing written and the change set still staged; a HEAD that does not
// resolve (a symbolic ref to a symbolic ref) leaves the agent's commits
// out, as with none.
func TestApplyGitBranchHostileHistory(t *testing.T) {
	for _, c := range []struct{ name, script, want string }{
		{"corrupt", `echo one > a.txt; echo two > c.txt; G add a.txt c.txt; G commit -qm c
b=$(G rev-parse HEAD:a.txt); t=$(G rev-parse HEAD:c.txt)
o=.git/objects/$(echo $b | cut -c1-2)/$(echo $b | cut -c3-); chmod u+w $o
cp .git/objects/$(echo $t | cut -c1-2)/$(echo $t | cut -c3-) $o
`, "does not hash to its id (corrupt)"},
		{"parent", `c=$(printf 'tree %s\nparent 1111111111111111111111111111111111111111\nauthor A <a@a> 1 +0000\ncommitter A <a@a> 1 +0000\n\nm\n' $(G rev-parse 'HEAD^{tree}') | G hash-object -t commit -w --literally --stdin)
echo $c > .git/refs/heads/main
`, "commit 1111111111111111111111111111111111111111 is in neither the session's objects nor the workspace's repository"},
		{"packcorrupt", `echo one > a.txt; G add a.txt; G commit -qm c; G gc -q
p=$(ls .git/objects/pack/*.pack); chmod u+w $p; n=$(wc -c < $p)
{ head -c 12 $p; head -c $((n-12)) /dev/zero | tr '\0' X; } > p.tmp; cat p.tmp > $p; rm p.tmp
`, "the agent's \".git/objects/pack/pack-"},
		{"long", `base=$(G rev-parse HEAD)
awk -v b=$base 'BEGIN { for (i = 0; i <= 10000; i++) { printf "commit refs/heads/main\ncommitter A <a@a> %d +0000\ndata 1\nx\n", i; if (i == 0) printf "from %s\n", b } }' |
	G -c fastimport.unpackLimit=100000 fast-import --quiet
`, "reaches more than 10000 new commits"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, out, _ := gitBranchEnv(t, c.name, c.script)
			before := repoState(t, e.ws)
			packs, _ := os.ReadDir(filepath.Join(e.ws, ".git", "objects", "pack"))
			msg := e.mustCLI(1, "apply", "--state-dir", e.state, "--git-branch", "agent", out)
			if !strings.Contains(msg, c.want) || !strings.Contains(msg, "nothing was written to the repository") {
				t.Errorf("apply --git-branch: %s\nwant %q", msg, c.want)
			}
			if after := repoState(t, e.ws); after != before {
				t.Errorf("a refused --git-branch changed the repository:\n%s\n---\n%s", before, after)
			}
			if now, _ := os.ReadDir(filepath.Join(e.ws, ".git", "objects", "pack")); len(now) != len(packs) {
				t.Errorf("a refused --git-branch wrote a pack")
			}
			if s := e.mustCLI(0, "sessions", "--state-dir", e.state); !strings.Contains(s, "staged") {
				t.Errorf("sessions after a refused --git-branch:\n%s", s)
			}
		})
	}
	t.Run("symref", func(t *testing.T) {
		e, out, _ := gitBranchEnv(t, "symref", `echo one > a.txt; G add a.txt; G commit -qm c
echo 'ref: refs/heads/loop' > .git/refs/heads/main; echo 'ref: refs/heads/main' > .git/refs/heads/loop
`)
		base := gitIn(t, e.ws, "rev-parse", "HEAD")
		e.mustCLI(0, "apply", "--state-dir", e.state, "--git-branch", "agent", out)
		if p := gitIn(t, e.ws, "rev-parse", "agent^"); p != base {
			t.Errorf("the branch's parent is %s, want HEAD at launch %s", p, base)
		}
	})
}
