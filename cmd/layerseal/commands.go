package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/urfave/cli/v3"

	"github.com/layerseal/layerseal"
	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/nsrun"
	"github.com/layerseal/layerseal/overlay"
	"github.com/layerseal/layerseal/policy"
	"github.com/layerseal/layerseal/probe"
)

func keygenCommand() *cli.Command {
	return &cli.Command{
		Name:        "keygen",
		Usage:       "make a signing key and its public key",
		Description: "Make a signing key (PEM PKCS#8, mode 0600) and its public key (OUT.pub): ed25519 (default), ml-dsa-65 (post-quantum, FIPS 204) or hybrid (both: every artifact carries both signatures and verifies only with both).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Usage: "private key `FILE` to create (its public key: FILE.pub)"},
			&cli.StringFlag{Name: "alg", Value: attest.AlgEd25519, Usage: "signature `ALGORITHM`: " + strings.Join(attest.Algorithms(), ", ")},
		},
		Action: func(_ context.Context, cmd *cli.Command) error {
			out := cmd.String("out")
			if out == "" || cmd.NArg() > 0 {
				return usageErr("usage: layerseal keygen [--alg %s] --out FILE", strings.Join(attest.Algorithms(), "|"))
			}
			alg := cmd.String("alg")
			if !slices.Contains(attest.Algorithms(), alg) {
				return usageErr("--alg %q is not an algorithm layerseal signs with: choose %s", alg, strings.Join(attest.Algorithms(), ", "))
			}
			id, err := attest.GenerateKey(alg, out, out+".pub")
			if err != nil {
				return exitWith(exitFailed, err)
			}
			fmt.Printf("key id:      %s\nprivate key: %s (keep it; run and recover sign with it)\npublic key:  %s.pub (give it to verify and show)\n", id, out, out)
			return nil
		},
	}
}

func runCommand() *cli.Command {
	stop := 1
	return &cli.Command{
		Name:        "run",
		Usage:       "run an agent on an overlay of the workspace and attest its changes",
		Description: "Run an agent over an overlay of the workspace, attest and apply its changes.",
		ArgsUsage:   "[--] COMMAND [ARG...]",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "workspace", Usage: "`DIR` the agent may change"},
			&cli.StringFlag{Name: "key", Usage: "private signing `KEY` (from keygen)"},
			&cli.StringFlag{Name: "out", Usage: "output `DIR` for launch.json, statement.json and checkpoints/"},
			stateDirFlag(),
			&cli.StringFlag{Name: "user", Usage: "run the agent as `USER[:GROUP]` (names or numeric ids)"},
			&cli.StringSliceFlag{Name: "env", Usage: "set `NAME[=VALUE]` in the agent's environment; NAME alone passes on this environment's value of NAME (repeatable). The launch record keeps no value passed by NAME alone, nor one whose name looks like a secret's (KEY, TOKEN, SECRET, PASSWORD, AUTH, ... in it)"},
			&cli.StringFlag{Name: "cwd", Usage: "agent's working `DIR`, relative to the workspace or absolute (default: the workspace)"},
			&cli.StringFlag{Name: "process", Usage: "OCI runtime-spec process JSON `FILE` describing the agent"},
			&cli.StringFlag{Name: "digest-cap", Usage: "largest file hashed, a `SIZE` such as 256MiB or 1GB (larger ones are compared by size and mtime)", DefaultText: policy.FormatSize(overlay.DefaultDigestCap)},
			&cli.Int64Flag{Name: "max-entries", Usage: "entry budget of the final walk: `N` entries", DefaultText: fmt.Sprint(overlay.DefaultMaxEntries)},
			&cli.Int64Flag{Name: "max-dir-entries", Usage: "largest directory examined: `N` entries", DefaultText: fmt.Sprint(overlay.DefaultMaxDirEntries)},
			&cli.DurationFlag{Name: "time-budget", Usage: "time budget of the final walk, a `DURATION` such as 10m", DefaultText: layerseal.DefaultTimeBudget.String()},
			&cli.DurationFlag{Name: "checkpoint-every", Usage: "take a signed checkpoint every `INTERVAL`, such as 30s (also on SIGUSR1 and on 'layerseal checkpoint OUT')", DefaultText: "none"},
			&cli.StringFlag{Name: "config", Usage: "policy `FILE` (default: layerseal.yaml in the workspace root, if any)"},
			&cli.StringSliceFlag{Name: "allow", Usage: "allow changes to protected paths matching `GLOB`, the built-in ones too (.git/config, .husky/**, a setuid file, ...: `layerseal rules` lists them) (repeatable)"},
			&cli.BoolFlag{Name: "stage", Usage: "keep the change set staged for review instead of applying it"},
			&cli.StringFlag{Name: "network", Value: "none", Usage: "the agent's network `MODE`: none (loopback only), proxy (loopback and a proxy to the --allow-net destinations only, every connection recorded in the statement) or host (the host's network, its loopback services included: recorded, with a warning)"},
			&cli.StringSliceFlag{Name: "allow-net", Usage: "let the agent reach `HOST[:PORT]` through the proxy, which records each connection (no port: 80 and 443; *.example.com: its subdomains; an IP literal for a private or loopback address); selects --network proxy (repeatable; adds to network: allow in layerseal.yaml)"},
			&cli.StringSliceFlag{Name: "rw", Usage: "let the agent write host `PATH` outside the workspace (repeatable; writes there are not attested)"},
			viewFlag(), roFlag(),
			&cli.IntFlag{Name: "preserve-fds", Usage: "pass `N` descriptors after stdin, stdout and stderr (3 .. 3+N-1) on to the agent; all others are closed", DefaultText: "none"},
			&cli.StringFlag{Name: "memory", Usage: "memory limit of the agent's cgroup (v2, or v1 where v2 lacks the controller), a `SIZE` such as 4GiB", DefaultText: "no limit"},
			&cli.Int64Flag{Name: "pids", Usage: "most processes and threads the agent may have at once (`N`); 0 for no limit", DefaultText: fmt.Sprint(nsrun.DefaultPidsMax)},
			&cli.StringFlag{Name: "max-upper", Usage: "stop the agent once its changes (the upper layer) take `SIZE` on disk, such as 10GiB; what it wrote is attested and staged (also max_upper: in layerseal.yaml)", DefaultText: "no limit"},
			&cli.StringFlag{Name: "min-free", Usage: "stop the agent once the state dir's filesystem has less than `SIZE` free; 0 keeps no reserve (also min_free: in layerseal.yaml)", DefaultText: "5% of its size"},
			&cli.StringFlag{Name: "seccomp", Value: "default", Usage: "system call `FILTER`: default, or unconfined to load none (recorded)"},
			&cli.BoolFlag{Name: "json", Usage: "print the result (exit status, whose it is, statement) as one JSON object, the last line on stdout"},
			&cli.StringFlag{Name: "log-output", Usage: "keep the agent's stdout and stderr as files stdout and stderr in `DIR` (new or empty, outside the workspace), still shown here; the statement records their digests"},
			&cli.StringFlag{Name: "log", Usage: "anchor the run's signed heads in the transparency log `DIR` (from log init) and write receipts beside them (default: log: in layerseal.yaml, if any)"},
		},
		StopOnNthArg: &stop,
		Action: func(_ context.Context, cmd *cli.Command) error {
			cfg, err := runConfig(cmd)
			if err != nil {
				var ee *exitError
				if errors.As(err, &ee) && ee.code == exitSetup && ee.err != nil {
					return runStatus(cmd, exitSetup, "layerseal", "layerseal failed before the agent started; nothing changed", ee.err, nil)
				}
				if errors.As(err, &ee) && ee.code == exitUsage && ee.err != nil {
					return runStatus(cmd, exitUsage, "layerseal", refusedLine, ee.err, nil)
				}
				return err
			}
			logDir, err := runLogDir(cmd)
			if err != nil {
				return err
			}
			prog := startProgress()
			cfg.Progress = progressFunc(prog)
			// An applied session's upper layer is removed in the
			// background (removeLeftLayers, below).
			cfg.LeaveRemoval = true
			res, err := layerseal.Run(cfg)
			prog.end()
			var setup *layerseal.SetupError
			switch {
			case errors.Is(err, nsrun.ErrCommandNotFound):
				if a := cfg.Process.Args[0]; strings.Contains(a, "/") && !filepath.IsAbs(a) {
					err = fmt.Errorf("%w (a relative command is looked up from the agent's working directory, %s: give its path from there, or an absolute one)", err, orDefault(cfg.Process.Cwd, "the workspace"))
				}
				return runStatus(cmd, exitNotFound, "layerseal", "the agent's command was not found; nothing ran and the output dir can be used again", err, nil)
			case errors.Is(err, layerseal.ErrUnderReserve):
				err = fmt.Errorf("%w: free space there, give a --state-dir on another filesystem, or a smaller --min-free", err)
				return runStatus(cmd, exitSetup, "layerseal", "layerseal failed before the agent started; nothing changed", err, nil)
			case errors.As(err, &setup):
				return runStatus(cmd, exitSetup, "layerseal", "layerseal failed before the agent started; nothing changed", err, nil)
			case err != nil:
				if res != nil {
					fmt.Fprintf(os.Stderr, "layerseal: the agent exited with status %d\n", res.Exit.Code)
				}
				if res != nil && res.Statement != nil && logDir != "" {
					anchorRun(logDir, cmd.String("out"))
				}
				return runStatus(cmd, exitSetup, "layerseal", "layerseal failed after the agent ran (the message above says what is kept)", err, res)
			}
			st := res.Statement
			fmt.Fprintf(os.Stderr, "layerseal: %d change(s), %s; statement %s/%s\n",
				len(st.Entries), completeness(st), cmd.String("out"), layerseal.StatementFile)
			for _, r := range st.Incomplete {
				fmt.Fprintf(os.Stderr, "layerseal: incomplete: %s\n", reasonText(r))
			}
			reportPolicy(st)
			writeAttributeNotes(os.Stderr, "layerseal: ", res.AttributeNotes)
			if n := layerseal.GitChanges(st); n > 0 {
				fmt.Fprintf(os.Stderr, "layerseal: warning: %s\n", strings.Replace(gitWarning(n), "OUT", cmd.String("out"), 1))
			}
			if res.Applied {
				removeLeftLayers(storeOf(cmd), st.SessionID)
			} else {
				ref := sessionArgs(cmd, st.SessionID)
				fmt.Fprintf(os.Stderr, "layerseal: staged, not applied: `layerseal diff %s` shows it; `layerseal apply %s` or `layerseal discard %s`\n", ref, ref, ref)
			}
			if logDir != "" {
				anchorRun(logDir, cmd.String("out"))
			}
			return runStatus(cmd, res.Exit.Code, "agent", "layerseal itself succeeded", nil, res)
		},
	}
}

// runResult is run --json's object: the exit status and whose it is.
type runResult struct {
	ExitStatus int          `json:"exit_status"`
	Whose      string       `json:"whose"` // "agent" or "layerseal"
	Agent      *exitJSON    `json:"agent"` // null when the agent did not run or was lost
	Error      attest.Bytes `json:"error,omitempty"`
	Statement  string       `json:"statement,omitempty"`
	Complete   bool         `json:"complete"`
	Applied    bool         `json:"applied"`
}

type exitJSON struct {
	Code   int    `json:"code"`
	Signal string `json:"signal,omitempty"`
}

// runStatus ends run: it prints err (if any) and then, as the last line
// on stderr, the exit status and whose it is, so a caller can tell the
// agent's status from layerseal's own failure whatever the agent printed
// before; with --json it prints runResult as the last line on stdout.
func runStatus(cmd *cli.Command, code int, whose, what string, err error, res *layerseal.RunResult) error {
	if err != nil {
		fmt.Fprintf(os.Stderr, "layerseal: %s\n", printable(err.Error()))
	}
	owner := "the agent's"
	if whose == "layerseal" {
		owner = "layerseal's own"
	}
	fmt.Fprintf(os.Stderr, "layerseal: exit status %d is %s: %s\n", code, owner, what)
	if cmd.Bool("json") {
		r := runResult{ExitStatus: code, Whose: whose}
		if err != nil {
			r.Error = attest.Bytes(err.Error())
		}
		if res != nil {
			r.Agent = &exitJSON{Code: res.Exit.Code, Signal: res.Exit.Signal}
			r.Applied = res.Applied
			if res.Statement != nil {
				r.Statement = filepath.Join(cmd.String("out"), layerseal.StatementFile)
				r.Complete = res.Statement.Complete
			}
		}
		printJSON(r)
	}
	return exitWith(code, nil)
}

// runConfig builds the session from run's flags; every problem is a usage
// error or names the bad input.
func runConfig(cmd *cli.Command) (layerseal.RunConfig, error) {
	var cfg layerseal.RunConfig
	var err error
	missing := []string{}
	for _, f := range []string{"workspace", "key", "out"} {
		if cmd.String(f) == "" {
			missing = append(missing, "--"+f)
		}
	}
	if late := lateFlags(cmd.Args().Slice(), missing); len(late) > 0 {
		return cfg, usageErr("run: %s came after the agent's command, which takes every argument from there on: give layerseal's options first, as in layerseal run --workspace DIR --key KEY --out DIR [options] -- COMMAND [ARG...]", strings.Join(late, ", "))
	}
	if len(missing) > 0 {
		verb := "are"
		if len(missing) == 1 {
			verb = "is"
		}
		return cfg, usageErr("run: %s %s required: layerseal run --workspace DIR --key KEY --out DIR [options] -- COMMAND [ARG...] (every option before the command)", strings.Join(missing, ", "), verb)
	}
	args := cmd.Args().Slice()
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	c, _ := layerseal.LoadConfig(cmd.String("workspace"), cmd.String("config")) // an error is reported by runPolicy
	network, allowNet, err := runNetwork(cmd, c)
	if err != nil {
		return cfg, err
	}
	proc := layerseal.DefaultProcess(args, 0, 0, network)
	if f := cmd.String("process"); f != "" {
		p, err := readProcess(f, network)
		if err != nil {
			return cfg, exitWith(exitSetup, err)
		}
		if len(args) > 0 && len(p.Args) > 0 {
			return cfg, usageErr("run: --process %q already names the agent's command (its \"args\"): give no command after --, or leave \"args\" out of the file", f)
		}
		if len(args) > 0 {
			p.Args = args
		}
		proc = p
	}
	if len(proc.Args) == 0 {
		return cfg, usageErr("run: no agent command given (layerseal run [flags] -- COMMAND [ARG...])")
	}
	if u := cmd.String("user"); u != "" {
		uid, gid, err := lookupUser(u)
		if err != nil {
			return cfg, exitWith(exitSetup, err)
		}
		if cmd.String("process") == "" {
			proc = layerseal.DefaultProcess(proc.Args, uid, gid, network)
		}
		proc.User.UID, proc.User.GID = uid, gid
	}
	var inherited []string
	if env := cmd.StringSlice("env"); len(env) > 0 {
		if proc.Env == nil {
			proc.Env = nsrun.DefaultEnv(proc.User.UID, os.Getenv("TERM"))
		}
		if proc.Env, inherited, err = addEnv(proc.Env, env, os.LookupEnv); err != nil {
			return cfg, usageErr("run: %v", err)
		}
	}
	if c := cmd.String("cwd"); c != "" {
		if !filepath.IsAbs(c) {
			// Relative to the workspace, at the path the agent sees it.
			ws, err := filepath.Abs(cmd.String("workspace"))
			if err == nil {
				if r, err := filepath.EvalSymlinks(ws); err == nil {
					ws = r
				}
			}
			c = filepath.Join(ws, c)
		}
		proc.Cwd = c
	}
	if err := layerseal.AgentMayWrite(cmd.String("workspace"), proc.User); errors.Is(err, layerseal.ErrAgentCannotWrite) {
		fmt.Fprintf(os.Stderr, "layerseal: warning: %v: it can change only what that user may; chown the workspace to the agent's user first, or run the agent as the owner\n", err)
	}
	pol := attest.Policy{
		MaxEntries:    cmd.Int64("max-entries"),
		MaxDirEntries: cmd.Int64("max-dir-entries"),
		TimeBudget:    cmd.Duration("time-budget"),
	}
	if s := cmd.String("digest-cap"); s != "" {
		n, err := policy.ParseSize(s)
		if err != nil {
			return cfg, usageErr("run: --digest-cap: %v", err)
		}
		pol.DigestCap = n
	}
	if err := readUpperLimits(cmd, &pol); err != nil {
		return cfg, err
	}
	if pol.MaxEntries < 0 || pol.MaxDirEntries < 0 || pol.TimeBudget < 0 {
		return cfg, usageErr("run: budgets must not be negative")
	}
	if pol, err = runPolicy(cmd, pol); err != nil {
		return cfg, err
	}
	if every := cmd.Duration("checkpoint-every"); every < 0 {
		return cfg, usageErr("run: --checkpoint-every must not be negative")
	} else if every > 0 {
		pol.CheckpointEvery = every
	}
	sandbox, err := runSandbox(cmd)
	if err != nil {
		return cfg, err
	}
	if sandbox.Network = network; network == layerseal.NetworkHost {
		fmt.Fprintf(os.Stderr, "layerseal: %s\n", hostNetworkWarning)
	}
	if err := needRoot("run"); err != nil {
		return cfg, err
	}
	signer, err := loadPrivateKey(cmd.String("key"))
	if err != nil {
		return cfg, err
	}
	return layerseal.RunConfig{
		Workspace:    cmd.String("workspace"),
		Key:          signer,
		KeyPath:      cmd.String("key"),
		Out:          cmd.String("out"),
		StateDir:     cmd.String("state-dir"),
		Process:      proc,
		Policy:       pol,
		Sandbox:      sandbox,
		Stdin:        os.Stdin,
		Stdout:       os.Stdout,
		Stderr:       os.Stderr,
		LogOutput:    cmd.String("log-output"),
		Log:          escapingWriter{os.Stderr},
		AllowNet:     allowNet,
		InheritedEnv: inherited,
	}, nil
}

// runSandbox reads run's confinement flags.
func runSandbox(cmd *cli.Command) (nsrun.Sandbox, error) {
	sb := nsrun.Sandbox{
		Network:     cmd.String("network"),
		PreserveFDs: cmd.Int("preserve-fds"),
		PidsMax:     cmd.Int64("pids"),
		Seccomp:     cmd.String("seccomp"),
	}
	switch {
	case sb.PidsMax < 0:
		return sb, usageErr("run: --pids %d: want a number of processes, or 0 for no limit", sb.PidsMax)
	case cmd.IsSet("pids") && sb.PidsMax == 0:
		sb.PidsMax = nsrun.NoPidsLimit
	}
	if s := cmd.String("memory"); s != "" {
		n, err := policy.ParseSize(s)
		if err != nil || n <= 0 {
			return sb, usageErr("run: --memory %q: want a size such as 512MiB or 4GiB", s)
		}
		sb.MemoryMax = n
	}
	for _, p := range cmd.StringSlice("rw") {
		abs, err := filepath.Abs(p)
		if err != nil {
			return sb, usageErr("run: --rw %q: %v", p, err)
		}
		sb.Writable = append(sb.Writable, abs)
	}
	if err := readView(cmd, &sb); err != nil {
		return sb, err
	}
	if err := sb.Validate(); err != nil {
		return sb, usageErr("run: %v", err)
	}
	return sb, nil
}

// readProcess reads an OCI runtime-spec process object, strictly. What it
// leaves out is what a command line gets: without "capabilities", the
// default set for its user and network (layerseal.DefaultProcess: no
// CAP_SYS_ADMIN, no CAP_NET_RAW under the host's network); without
// "noNewPrivileges", true.
func readProcess(path, network string) (specs.Process, error) {
	var p specs.Process
	b, err := os.ReadFile(path)
	if err != nil {
		return p, fmt.Errorf("process file: %w", err)
	}
	if err := json.Unmarshal(b, &p, json.RejectUnknownMembers(true)); err != nil {
		return p, fmt.Errorf("process file %q: %w", path, err)
	}
	var given map[string]jsontext.Value
	if err := json.Unmarshal(b, &given); err != nil {
		return p, fmt.Errorf("process file %q: %w", path, err)
	}
	def := layerseal.DefaultProcess(p.Args, p.User.UID, p.User.GID, network)
	if _, ok := given["capabilities"]; !ok {
		p.Capabilities = def.Capabilities
	}
	if _, ok := given["noNewPrivileges"]; !ok {
		p.NoNewPrivileges = true
	}
	return p, nil
}

func probeCommand() *cli.Command {
	return &cli.Command{
		Name:        "probe",
		Usage:       "print what this kernel offers layerseal, and a verdict",
		Description: "Print what this kernel offers that layerseal uses, each found by trying, and what layerseal will do here.",
		Flags:       []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON: the findings, and the verdict as \"verdict\""}},
		Action: func(_ context.Context, cmd *cli.Command) error {
			f, err := probe.Detect()
			if err != nil {
				return exitWith(exitFailed, err)
			}
			limits := nsrun.LimitHierarchies()
			verdict := f.Verdict().WithLimits(limits)
			if cmd.Bool("json") {
				b, err := json.Marshal(struct {
					probe.Features
					Limits  map[string]string `json:"limits"`
					Verdict probe.Verdict     `json:"verdict"`
				}{f, limits, verdict}, json.Deterministic(true))
				if err != nil {
					return exitWith(exitFailed, err)
				}
				fmt.Println(string(b))
				return nil
			}
			if err := f.WriteText(os.Stdout); err != nil {
				return exitWith(exitFailed, err)
			}
			for _, ctl := range []string{"memory", "pids"} {
				fmt.Printf("%-31s%s\n", "limits: "+ctl, orDefault(limits[ctl], "none"))
			}
			fmt.Println()
			for _, l := range verdict.Lines() {
				fmt.Println(l)
			}
			return nil
		},
	}
}

func completeness(st *attest.Statement) string {
	if st.Complete {
		return "complete"
	}
	return fmt.Sprintf("INCOMPLETE (%d reason(s))", len(st.Incomplete))
}

func reasonText(r attest.Reason) string {
	s := string(r.Code)
	if r.Path != "" {
		s += " " + r.Path.String()
	}
	return s + ": " + attest.Bytes(r.Detail).String()
}

// loadPrivateKey reads run's and recover's --key, saying so when it is a
// public key.
func loadPrivateKey(path string) (*attest.Signer, error) {
	signer, err := attest.LoadPrivateKey(path)
	if err != nil {
		if _, perr := attest.LoadPublicKey(path); perr == nil {
			return nil, usageErr("--key %q is a public key: give the private key it belongs to (the file keygen --out wrote, without .pub)", path)
		}
		return nil, exitWith(exitSetup, err)
	}
	return signer, nil
}

// addEnv returns env with run's --env values set in order (setEnv), and the
// names whose values were taken from the caller's environment (lookup): a
// value given as NAME alone. A name given again as NAME=VALUE later is
// not among them. An empty name, or a NAME the caller's environment does
// not hold, is an error naming it.
func addEnv(env, given []string, lookup func(string) (string, bool)) ([]string, []string, error) {
	var inherited []string
	for _, kv := range given {
		name, _, hasValue := strings.Cut(kv, "=")
		if name == "" {
			// The value is not repeated: it may be a secret.
			return nil, nil, errors.New("--env with an empty NAME: want NAME=VALUE, or NAME alone to pass on this environment's value")
		}
		inherited = slices.DeleteFunc(inherited, func(n string) bool { return n == name })
		if !hasValue {
			v, ok := lookup(name)
			if !ok {
				return nil, nil, fmt.Errorf("--env %q: %s is not set in this environment: set it, or give %s=VALUE", kv, name, name)
			}
			kv = name + "=" + v
			inherited = append(inherited, name)
		}
		env = setEnv(env, kv)
	}
	return env, inherited, nil
}

// setEnv returns env with kv (NAME=VALUE) last and no other entry of the
// same NAME: the agent, and the launch record, hold one value of each
// name, the one given last (a default PATH is replaced, not repeated).
func setEnv(env []string, kv string) []string {
	name, _, _ := strings.Cut(kv, "=")
	out := slices.DeleteFunc(slices.Clone(env), func(e string) bool { return strings.HasPrefix(e, name+"=") })
	return append(out, kv)
}

// lateFlags are the flags of names (such as "--workspace") that args, the
// agent's command line, holds: run's own options given after the command,
// which then become the agent's arguments.
func lateFlags(args, names []string) []string {
	var late []string
	for _, n := range names {
		if slices.ContainsFunc(args, func(a string) bool { return a == n || strings.HasPrefix(a, n+"=") }) {
			late = append(late, n)
		}
	}
	return late
}

// refusedLine is run's closing line for a command line it refused.
const refusedLine = "the command line was refused; nothing ran"
