package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/layerseal/layerseal"
	"github.com/layerseal/layerseal/attest"
)

// writeReport prints, one per line after prefix, what a statement says
// beyond its change list: the agent's exit, the violations with rule and
// action, the excluded subtrees with counts, the change set to apply and
// where the session stands (info, when the state dir was reachable), a
// call-out of .git changed in a run with violations, and the reasons.
// Violations beneath one reverted with its subtree are counted on its
// line unless all is set.
func writeReport(w io.Writer, prefix string, st *attest.Statement, info *layerseal.SessionInfo, all bool) {
	fmt.Fprintf(w, "%sexit: %s\n", prefix, st.Exit)
	for _, v := range foldViolations(st, all) {
		fmt.Fprintf(w, "%sviolation: %s (rule %q): %s%s\n", prefix, v.Path, v.Rule, v.Action, v.beneathText())
	}
	for _, x := range st.Excluded {
		fmt.Fprintf(w, "%sexcluded: %s: %s, %d bytes\n", prefix, x.Path, plural(x.Entries, "entry", "entries"), x.Bytes)
	}
	fmt.Fprintf(w, "%schange set: %d of %d change(s) to apply after the sweep, and %d excluded subtree(s); %s\n",
		prefix, st.AppliedCount, st.Count, len(st.Excluded), sessionText(info))
	if n := layerseal.GitChanges(st); n > 0 {
		fmt.Fprintf(w, "%swarning: %s\n", prefix, gitWarning(n))
	}
	for _, l := range st.Logs {
		trunc := ""
		if l.Truncated {
			trunc = " (truncated: writing the log failed, the rest went only to the terminal)"
		}
		fmt.Fprintf(w, "%slog: %s: %d bytes, sha256 %x%s\n", prefix, l.Name, l.Size, l.SHA256, trunc)
	}
	writeEgress(w, prefix, st.Egress)
	for _, r := range st.Incomplete {
		fmt.Fprintf(w, "%sincomplete: %s\n", prefix, reasonText(r))
	}
}

// foldedViolation is a violation and the number of violations beneath
// its path, with the same action, that it stands for.
type foldedViolation struct {
	attest.Violation
	beneath int
}

// foldViolations folds the violations beneath a directory the agent
// added, itself a violation with the same action, into that one's count:
// a repository the agent made, reverted with everything in it, is one
// line, not one per hook sample. A directory that only changed keeps
// every line beneath it (its own line is often just its mtime), and so
// does a directory with one violation beneath. all turns folding off.
func foldViolations(st *attest.Statement, all bool) []foldedViolation {
	if all {
		out := make([]foldedViolation, len(st.Violations))
		for i, v := range st.Violations {
			out[i] = foldedViolation{Violation: v}
		}
		return out
	}
	added := map[attest.Path]bool{}
	for _, e := range st.Entries {
		if e.New != nil && e.New.Type == attest.Dir && (e.Old == nil || e.Old.Type != attest.Dir) {
			added[e.Path] = true
		}
	}
	var out []foldedViolation
	var folded [][]attest.Violation // per line of out, the violations folded into it
	for _, v := range st.Violations {
		if n := len(out); n > 0 && added[out[n-1].Path] && out[n-1].Action == v.Action && attest.Within(v.Path, out[n-1].Path) {
			folded[n-1] = append(folded[n-1], v)
			continue
		}
		out = append(out, foldedViolation{Violation: v})
		folded = append(folded, nil)
	}
	var lines []foldedViolation
	for i, v := range out {
		lines = append(lines, v)
		if len(folded[i]) == 1 {
			lines = append(lines, foldedViolation{Violation: folded[i][0]})
		} else {
			lines[len(lines)-1].beneath = len(folded[i])
		}
	}
	return lines
}

func (v foldedViolation) beneathText() string {
	if v.beneath == 0 {
		return ""
	}
	return fmt.Sprintf(", and %d violation(s) beneath it (`layerseal show --all` lists them)", v.beneath)
}

// gitWarning calls out .git changed in a run that also changed protected
// paths.
func gitWarning(n int) string {
	return fmt.Sprintf("the agent changed protected paths and also %d entr(ies) in .git: a commit it made can hold the content the sweep reverted; review .git before applying it (`layerseal apply --skip OUT .git` leaves it out)", n)
}

// sessionText says where the session stands.
func sessionText(info *layerseal.SessionInfo) string {
	if info == nil && layerseal.RequireRoot() == nil {
		return "session state not known here: the session is not in this state dir (pruned, or the run used another: --state-dir DIR, and `layerseal sessions --state-dir DIR` lists them)"
	}
	if info == nil {
		return "session state not known here: reading it needs root and the state dir the run used (--state-dir, or `layerseal sessions --state-dir DIR`)"
	}
	switch {
	case info.State == layerseal.StateApplied && info.Discarded > 0:
		return fmt.Sprintf("settled: %d change(s) applied, %d discarded", info.Applied, info.Discarded)
	case info.State == layerseal.StateApplied && len(info.Skipped) > 0:
		skipped := make([]string, len(info.Skipped))
		for i, p := range info.Skipped {
			skipped[i] = p.String()
		}
		return fmt.Sprintf("partly applied: all but %s (and what lies beneath)", strings.Join(skipped, ", "))
	case info.State == layerseal.StateApplied:
		return fmt.Sprintf("applied: %d change(s)", info.ToApply)
	case info.State == layerseal.StateBranch:
		return fmt.Sprintf("branch %s (commit %s): written to that git branch; the workspace is as it was, %d change(s) still staged", strings.TrimPrefix(info.GitBranch, "refs/heads/"), info.GitCommit, info.Staged)
	case info.State == layerseal.StateStaged && info.Applied+info.Discarded > 0:
		return fmt.Sprintf("partly settled: %d change(s) applied, %d discarded, %d still staged", info.Applied, info.Discarded, info.Staged)
	case info.State == layerseal.StateStaged:
		return fmt.Sprintf("staged: %d change(s) not applied yet", info.ToApply)
	}
	return "session " + info.State
}

// reportJSON is writeReport's content for --json.
func reportJSON(st *attest.Statement, info *layerseal.SessionInfo) map[string]any {
	xs := []excludedJSON{}
	for _, x := range st.Excluded {
		xs = append(xs, excludedJSON(x))
	}
	vs := []violationJSON{}
	for _, v := range st.Violations {
		vs = append(vs, violationJSON(v))
	}
	m := map[string]any{
		"exit":          map[string]any{"code": st.Exit.Code, "signal": st.Exit.Signal, "unknown": st.Exit.Unknown, "interrupt": st.Exit.Interrupt},
		"violations":    vs,
		"excluded":      xs,
		"count":         st.Count,
		"applied_count": st.AppliedCount,
		"git_changes":   layerseal.GitChanges(st),
		"incomplete":    reasonsJSON(st.Incomplete),
	}
	if len(st.Logs) > 0 {
		ls := []map[string]any{}
		for _, l := range st.Logs {
			ls = append(ls, map[string]any{"name": l.Name, "size": l.Size, "sha256": fmt.Sprintf("%x", l.SHA256), "truncated": l.Truncated})
		}
		m["logs"] = ls
	}
	if len(st.Egress) > 0 {
		m["egress"] = egressJSON(st.Egress)
	}
	if info != nil {
		s := map[string]any{"state": info.State, "to_apply": info.ToApply}
		if len(info.Skipped) > 0 {
			s["skipped"] = info.Skipped
		}
		m["session"] = s
	}
	return m
}

// sessionOf looks the statement's session up in the state dir, when this
// process can read it; nil otherwise.
func sessionOf(stateDir string, st *attest.Statement) *layerseal.SessionInfo {
	if layerseal.RequireRoot() != nil {
		return nil
	}
	info, err := layerseal.OpenStore(stateDir).Session(st.SessionID)
	if err != nil || info.ID != st.SessionID {
		return nil
	}
	return info
}

// writeLaunch prints a launch record for a person.
func writeLaunch(w io.Writer, l *attest.LaunchRecord, state string) {
	fmt.Fprintf(w, "launch record of session %s, %s\n", l.SessionID, state)
	fmt.Fprintf(w, "workspace: %s\n", l.Workspace)
	fmt.Fprintf(w, "started: %s\n", l.Started.Format("2006-01-02 15:04:05.000 MST"))
	args := make([]string, len(l.Agent.Args))
	for i, a := range l.Agent.Args {
		args[i] = fmt.Sprintf("%q", a)
	}
	fmt.Fprintf(w, "agent: %s (uid %d, gid %d)\n", strings.Join(args, " "), l.Agent.User.UID, l.Agent.User.GID)
	fmt.Fprintf(w, "key: %s\n", l.KeyID)
	fmt.Fprintf(w, "kernel: %s; overlay: %s\n", l.Kernel.Release, strings.Join(l.Overlay.Options, ","))
	fmt.Fprintf(w, "sandbox: network %s, seccomp %s, %s\n", l.Sandbox.Network, l.Sandbox.Seccomp, scopesText(l.Sandbox))
	if len(l.Sandbox.AllowNet) > 0 {
		fmt.Fprintf(w, "network allowed: %s\n", strings.Join(l.Sandbox.AllowNet, ", "))
	}
	if l.Sandbox.Network == layerseal.NetworkHost {
		fmt.Fprintf(w, "%s\n", hostNetworkWarning)
	}
	writeLimits(w, l)
	writeView(w, l.Sandbox)
	p := l.Policy
	fmt.Fprintf(w, "policy: apply %s, digest cap %d bytes, %d entries, %d per directory\n", orDefault(p.Apply, "auto"), p.DigestCap, p.MaxEntries, p.MaxDirEntries)
	if p.MaxUpper > 0 || p.MinFree > 0 {
		fmt.Fprintf(w, "upper layer: %s\n", upperLimitText(p))
	}
	for _, g := range []struct {
		what string
		ps   []attest.Path
	}{{"excluded", p.Exclude}, {"protected", p.Protect}, {"allowed", p.Allow}} {
		if len(g.ps) > 0 {
			texts := make([]string, len(g.ps))
			for i, x := range g.ps {
				texts[i] = x.String()
			}
			fmt.Fprintf(w, "%s: %s\n", g.what, strings.Join(texts, ", "))
		}
	}
	fmt.Fprintf(w, "layerseal %s\n", l.ToolVersion)
}

// scopesText says which Landlock scopes confined the agent, and what their
// absence left open.
func scopesText(sb attest.Sandbox) string {
	if len(sb.Scoped) > 0 {
		return "landlock scopes " + strings.Join(sb.Scoped, ", ")
	}
	if sb.Network == "host" {
		return "no landlock scopes (the agent could connect to the host's abstract unix sockets)"
	}
	return "no landlock scopes"
}

// nonNilStrings is ss, or an empty list for JSON's sake.
func nonNilStrings(ss []string) []string {
	if ss == nil {
		return []string{}
	}
	return ss
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// plural is n with the noun in the form n takes: "1 entry", "2 entries".
func plural[N int | int64 | uint64](n N, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}
