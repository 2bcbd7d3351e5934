package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/urfave/cli/v3"

	"github.com/layerseal/layerseal"
	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/nsrun"
	"github.com/layerseal/layerseal/probe"
)

func keygenCommand() *cli.Command {
	return &cli.Command{
		Name:  "keygen",
		Usage: "make an ed25519 signing key (PEM PKCS#8, mode 0600) and its public key (OUT.pub)",
		Flags: []cli.Flag{&cli.StringFlag{Name: "out", Usage: "private key file to create"}},
		Action: func(_ context.Context, cmd *cli.Command) error {
			out := cmd.String("out")
			if out == "" || cmd.NArg() > 0 {
				return usageErr("usage: layerseal keygen --out FILE")
			}
			id, err := attest.GenerateKey(out, out+".pub")
			if err != nil {
				return exitWith(exitFailed, err)
			}
			fmt.Printf("%s\t%s\t%s.pub\n", id, out, out)
			return nil
		},
	}
}

func runCommand() *cli.Command {
	stop := 1
	return &cli.Command{
		Name:      "run",
		Usage:     "run an agent over an overlay of the workspace, attest and apply its changes",
		ArgsUsage: "[--] COMMAND [ARG...]",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "workspace", Usage: "directory the agent may change"},
			&cli.StringFlag{Name: "key", Usage: "signing key (from keygen)"},
			&cli.StringFlag{Name: "out", Usage: "output dir for launch.json and statement.json"},
			stateDirFlag(),
			&cli.StringFlag{Name: "user", Usage: "run the agent as `USER[:GROUP]` (names or numeric ids)"},
			&cli.StringSliceFlag{Name: "env", Usage: "set `NAME=VALUE` in the agent's environment (repeatable)"},
			&cli.StringFlag{Name: "cwd", Usage: "agent's working directory (default: the workspace)"},
			&cli.StringFlag{Name: "process", Usage: "OCI runtime-spec process JSON `FILE` describing the agent"},
			&cli.StringFlag{Name: "digest-cap", Usage: "largest file hashed, e.g. 256MiB (larger ones are compared by size and mtime)"},
			&cli.Int64Flag{Name: "max-entries", Usage: "entry budget of the final walk"},
			&cli.Int64Flag{Name: "max-dir-entries", Usage: "largest directory examined"},
			&cli.DurationFlag{Name: "time-budget", Usage: "time budget of the final walk"},
			&cli.DurationFlag{Name: "checkpoint-every", Usage: "take a signed checkpoint at this interval, e.g. 30s (also on SIGUSR1 and `layerseal checkpoint OUT`)"},
			&cli.StringFlag{Name: "config", Usage: "policy `FILE` (default: layerseal.yaml in the workspace root, if any)"},
			&cli.StringSliceFlag{Name: "allow", Usage: "allow changes to protected paths matching `GLOB` (repeatable)"},
			&cli.BoolFlag{Name: "stage", Usage: "keep the change set staged for review instead of applying it"},
		},
		StopOnNthArg: &stop,
		Action: func(_ context.Context, cmd *cli.Command) error {
			cfg, err := runConfig(cmd)
			if err != nil {
				return err
			}
			res, err := layerseal.Run(cfg)
			var setup *layerseal.SetupError
			switch {
			case errors.Is(err, nsrun.ErrCommandNotFound):
				return exitWith(exitNotFound, err)
			case errors.As(err, &setup):
				return exitWith(exitSetup, err)
			case err != nil:
				if res != nil {
					fmt.Fprintf(os.Stderr, "layerseal: the agent exited with status %d\n", res.Exit.Code)
				}
				return exitWith(exitSetup, err)
			}
			st := res.Statement
			fmt.Fprintf(os.Stderr, "layerseal: %d change(s), %s; statement %s/%s\n",
				len(st.Entries), completeness(st), cmd.String("out"), layerseal.StatementFile)
			for _, r := range st.Incomplete {
				fmt.Fprintf(os.Stderr, "layerseal: incomplete: %s\n", reasonText(r))
			}
			reportPolicy(st)
			if n := layerseal.GitChanges(st); n > 0 {
				fmt.Fprintf(os.Stderr, "layerseal: warning: %s\n", strings.Replace(gitWarning(n), "OUT", cmd.String("out"), 1))
			}
			if !res.Applied {
				fmt.Fprintf(os.Stderr, "layerseal: staged, not applied: `layerseal diff %s` shows it; `layerseal apply %s` or `layerseal discard %s`\n",
					cmd.String("out"), cmd.String("out"), cmd.String("out"))
			}
			if res.Exit.Code != 0 {
				return exitWith(res.Exit.Code, nil)
			}
			return nil
		},
	}
}

// runConfig builds the session from run's flags; every problem is a usage
// error or names the bad input.
func runConfig(cmd *cli.Command) (layerseal.RunConfig, error) {
	var cfg layerseal.RunConfig
	var err error
	for _, f := range []string{"workspace", "key", "out"} {
		if cmd.String(f) == "" {
			return cfg, usageErr("run: --%s is required", f)
		}
	}
	args := cmd.Args().Slice()
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	proc := layerseal.DefaultProcess(args, 0, 0)
	if f := cmd.String("process"); f != "" {
		p, err := readProcess(f)
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
			proc = layerseal.DefaultProcess(proc.Args, uid, gid)
		}
		proc.User.UID, proc.User.GID = uid, gid
	}
	if env := cmd.StringSlice("env"); len(env) > 0 {
		if proc.Env == nil {
			proc.Env = nsrun.DefaultEnv(proc.User.UID, os.Getenv("TERM"))
		}
		for _, kv := range env {
			if !strings.Contains(kv, "=") || strings.HasPrefix(kv, "=") {
				return cfg, usageErr("run: --env %q: want NAME=VALUE", kv)
			}
			proc.Env = append(proc.Env, kv)
		}
	}
	if c := cmd.String("cwd"); c != "" {
		proc.Cwd = c
	}
	policy := attest.Policy{
		MaxEntries:    cmd.Int64("max-entries"),
		MaxDirEntries: cmd.Int64("max-dir-entries"),
		TimeBudget:    cmd.Duration("time-budget"),
	}
	if s := cmd.String("digest-cap"); s != "" {
		n, err := parseSize(s)
		if err != nil {
			return cfg, usageErr("run: --digest-cap %q: %v", s, err)
		}
		policy.DigestCap = n
	}
	if policy.MaxEntries < 0 || policy.MaxDirEntries < 0 || policy.TimeBudget < 0 {
		return cfg, usageErr("run: budgets must not be negative")
	}
	if policy, err = runPolicy(cmd, policy); err != nil {
		return cfg, err
	}
	if every := cmd.Duration("checkpoint-every"); every < 0 {
		return cfg, usageErr("run: --checkpoint-every must not be negative")
	} else if every > 0 {
		policy.CheckpointEvery = every
	}
	if err := needRoot("run"); err != nil {
		return cfg, err
	}
	signer, err := attest.LoadPrivateKey(cmd.String("key"))
	if err != nil {
		return cfg, exitWith(exitSetup, err)
	}
	return layerseal.RunConfig{
		Workspace: cmd.String("workspace"),
		Key:       signer,
		KeyPath:   cmd.String("key"),
		Out:       cmd.String("out"),
		StateDir:  cmd.String("state-dir"),
		Process:   proc,
		Policy:    policy,
		Stdin:     os.Stdin,
		Stdout:    os.Stdout,
		Stderr:    os.Stderr,
		Log:       os.Stderr,
	}, nil
}

// readProcess reads an OCI runtime-spec process object, strictly. What it
// leaves out is what a command line gets: without "capabilities", the
// default set for its user (layerseal.DefaultProcess: no CAP_SYS_ADMIN);
// without "noNewPrivileges", true.
func readProcess(path string) (specs.Process, error) {
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
	def := layerseal.DefaultProcess(p.Args, p.User.UID, p.User.GID)
	if _, ok := given["capabilities"]; !ok {
		p.Capabilities = def.Capabilities
	}
	if _, ok := given["noNewPrivileges"]; !ok {
		p.NoNewPrivileges = true
	}
	return p, nil
}

// lookupUser resolves USER[:GROUP], names or numbers; a user's primary
// group is the default.
func lookupUser(s string) (uid, gid uint32, err error) {
	name, group, hasGroup := strings.Cut(s, ":")
	num := func(v string) (uint32, bool) {
		n, err := strconv.ParseUint(v, 10, 32)
		return uint32(n), err == nil
	}
	if n, ok := num(name); ok {
		uid, gid = n, n
		if u, err := user.LookupId(name); err == nil {
			g, _ := num(u.Gid)
			gid = g
		}
	} else {
		u, err := user.Lookup(name)
		if err != nil {
			return 0, 0, fmt.Errorf("--user %q: no such user", s)
		}
		uid, _ = num(u.Uid)
		gid, _ = num(u.Gid)
	}
	if hasGroup {
		if n, ok := num(group); ok {
			gid = n
		} else {
			g, err := user.LookupGroup(group)
			if err != nil {
				return 0, 0, fmt.Errorf("--user %q: no such group %q", s, group)
			}
			gid, _ = num(g.Gid)
		}
	}
	return uid, gid, nil
}

// parseSize reads a byte count such as 1048576, 512KiB, 256MiB or 4GiB.
func parseSize(s string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.m
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, errors.New("want a positive byte count such as 256MiB")
	}
	return n * mult, nil
}

func probeCommand() *cli.Command {
	return &cli.Command{
		Name:  "probe",
		Usage: "print what this kernel offers that layerseal uses, each found by trying",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON"}},
		Action: func(_ context.Context, cmd *cli.Command) error {
			f, err := probe.Detect()
			if err != nil {
				return exitWith(exitFailed, err)
			}
			if cmd.Bool("json") {
				b, err := json.Marshal(f, json.Deterministic(true))
				if err != nil {
					return exitWith(exitFailed, err)
				}
				fmt.Println(string(b))
				return nil
			}
			if err := f.WriteText(os.Stdout); err != nil {
				return exitWith(exitFailed, err)
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
	return s + ": " + r.Detail
}
