package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/layerseal/layerseal"
	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/nsrun"
)

// viewFlag is run's --view: what of the host the agent sees.
func viewFlag() cli.Flag {
	return &cli.StringFlag{Name: "view", Usage: "what of the host the agent sees (`minimal|host`): minimal shows the system's programs and libraries read-only, with /etc's secrets masked, and what --ro and --rw name; host shows the whole host read-only (recorded, and show warns)", DefaultText: "minimal"}
}

// roFlag is run's --ro: a host path the agent may read.
func roFlag() cli.Flag {
	return &cli.StringSliceFlag{Name: "ro", Usage: "let the agent read host `PATH` at its own path (repeatable)"}
}

// readView adds run's --view and --ro, and the view: and ro: of the
// configuration, to sb: --view wins over view:, --ro adds to ro:.
func readView(cmd *cli.Command, sb *nsrun.Sandbox) error {
	c, err := layerseal.LoadConfig(cmd.String("workspace"), cmd.String("config"))
	if err != nil {
		return usageErr("run: %v", err)
	}
	if c != nil {
		sb.View, sb.ReadOnly = c.View, append(sb.ReadOnly, c.ReadOnly...)
	}
	if cmd.IsSet("view") {
		v := cmd.String("view")
		if v != nsrun.ViewMinimal && v != nsrun.ViewHost {
			return usageErr("run: --view %q: want %s or %s", v, nsrun.ViewMinimal, nsrun.ViewHost)
		}
		sb.View = v
	}
	for _, p := range cmd.StringSlice("ro") {
		if p == "" || strings.IndexByte(p, 0) >= 0 {
			return usageErr("run: --ro %q: not a path", p)
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return usageErr("run: --ro %q: %v", p, err)
		}
		sb.ReadOnly = append(sb.ReadOnly, abs)
	}
	if sb.View == nsrun.ViewHost {
		fmt.Fprintln(os.Stderr, "layerseal: warning: "+hostViewWarning)
		if len(sb.ReadOnly) > 0 {
			fmt.Fprintf(os.Stderr, "layerseal: warning: read-only paths (--ro, ro:) left out: the host view shows the whole host already\n")
			sb.ReadOnly = nil
		}
	}
	return nil
}

// hostViewWarning says what the host view leaves open.
const hostViewWarning = "the agent sees the whole host read-only (view host): it can read what its user may, the host's secrets too (/etc/shadow and /root for a root agent), and reach the host's unix sockets"

// writeView prints the view a launch record names: the host paths bound
// read-only, or a warning for the host view (named, or implied by a record
// made before views).
func writeView(w io.Writer, sb attest.Sandbox) {
	if sb.HostView() {
		fmt.Fprintf(w, "warning: %s\n", strings.Replace(hostViewWarning, "sees", "saw", 1))
		return
	}
	ro := make([]string, len(sb.ReadOnly))
	for i, p := range sb.ReadOnly {
		ro[i] = printable(p)
	}
	fmt.Fprintf(w, "view: minimal; read-only from the host: %s\n", strings.Join(ro, ", "))
}

// viewName is the view a launch record names, "host" for a record made
// before views.
func viewName(sb attest.Sandbox) string {
	if sb.HostView() {
		return nsrun.ViewHost
	}
	return nsrun.ViewMinimal
}

// writeViewBeside prints, after prefix, the host view's warning for a
// statement whose session's launch record (launch.json beside it) names
// the host view or none. A launch record it cannot read, or another
// session's, prints nothing: the warning is a reminder, not a verdict.
func writeViewBeside(w io.Writer, prefix, statement, sessionID string) {
	env, err := attest.ReadArtifact(filepath.Join(filepath.Dir(statement), layerseal.LaunchFile))
	if err != nil {
		return
	}
	l, err := attest.ReadLaunch(env)
	if err != nil || l.SessionID != sessionID || !l.Sandbox.HostView() {
		return
	}
	fmt.Fprintf(w, "%swarning: %s\n", prefix, strings.Replace(hostViewWarning, "sees", "saw", 1))
}
