package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"regexp"
	"strconv"
	"strings"

	"github.com/layerseal/layerseal/probe"
)

// Cell is one suite's outcome on one kernel.
type Cell struct {
	Pass    bool
	Exit    int
	Seconds int
}

// Column is everything one kernel's run reported.
type Column struct {
	Name     string // "host", "5.10", ...
	Release  string
	Cells    map[string]Cell              // "MODE NAME" → outcome
	Reports  map[string]map[string]string // MODE → key → value
	Features map[string]probe.Features    // MODE → probe findings
	Ended    bool                         // the end marker was seen
	Problems []string                     // what went wrong outside the suites
	Tail     []string                     // last lines of the log, kept when failed
}

// Failed reports whether the column holds any failure.
func (c *Column) Failed() bool {
	if !c.Ended || len(c.Problems) > 0 {
		return true
	}
	for _, cell := range c.Cells {
		if !cell.Pass {
			return true
		}
	}
	return false
}

// merge adds to c what another guest of the same kernel reported (one that
// ran other passes): c is whole only if both guests reached their end.
func (c *Column) merge(o *Column) {
	if c.Release == "" {
		c.Release = o.Release
	}
	maps.Copy(c.Cells, o.Cells)
	for mode, r := range o.Reports {
		if c.Reports[mode] == nil {
			c.Reports[mode] = map[string]string{}
		}
		maps.Copy(c.Reports[mode], r)
	}
	maps.Copy(c.Features, o.Features)
	c.Ended = c.Ended && o.Ended
	for _, p := range o.Problems {
		c.Problems = append(c.Problems, o.Name+": "+p)
	}
	if len(o.Tail) > 0 {
		c.Tail = append(append(c.Tail, "-- "+o.Name+" --"), o.Tail...)
	}
}

// kernelMessage matches a kernel log line on a console.
var kernelMessage = regexp.MustCompile(`^\[ *[0-9]+\.[0-9]+\] `)

// tailLines is how much of a failed guest's log is kept.
const tailLines = 40

// parseLog reads guest.sh's "@@kt" lines from a log that may hold other
// output too (test output, kernel messages, a serial console's carriage
// returns). A suite that began and never reported is a failure; a log
// without the end marker means the guest died (or hung) before finishing.
func parseLog(name string, r io.Reader) *Column {
	c := &Column{Name: name, Cells: map[string]Cell{}, Reports: map[string]map[string]string{}, Features: map[string]probe.Features{}}
	var tail []string
	var probeMode string
	var probeJSON strings.Builder
	running := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		tail = append(tail, line)
		if len(tail) > tailLines {
			tail = tail[1:]
		}
		i := strings.Index(line, "@@kt ")
		if i < 0 {
			if probeMode != "" && !kernelMessage.MatchString(line) {
				probeJSON.WriteString(line + "\n")
			}
			continue
		}
		f := strings.Fields(line[i+len("@@kt "):])
		switch {
		case len(f) == 2 && f[0] == "kernel":
			c.Release = f[1]
		case len(f) == 3 && f[0] == "probe" && f[2] == "begin":
			probeMode = f[1]
			probeJSON.Reset()
		case len(f) == 3 && f[0] == "probe" && f[2] == "end":
			var feat probe.Features
			if err := json.Unmarshal([]byte(probeJSON.String()), &feat); err != nil {
				c.Problems = append(c.Problems, fmt.Sprintf("probe (%s): unreadable JSON: %v", f[1], err))
			} else {
				c.Features[f[1]] = feat
			}
			probeMode = ""
		case len(f) == 4 && f[0] == "suite" && f[3] == "begin":
			running = f[1] + " " + f[2]
		case len(f) == 6 && f[0] == "suite" && (f[3] == "pass" || f[3] == "fail"):
			exit, _ := strconv.Atoi(f[4])
			secs, _ := strconv.Atoi(f[5])
			c.Cells[f[1]+" "+f[2]] = Cell{Pass: f[3] == "pass" && exit == 0, Exit: exit, Seconds: secs}
			running = ""
		case len(f) >= 3 && f[0] == "report":
			if c.Reports[f[1]] == nil {
				c.Reports[f[1]] = map[string]string{}
			}
			c.Reports[f[1]][f[2]] = strings.Join(f[3:], " ")
		case len(f) == 1 && f[0] == "end":
			c.Ended = true
		case len(f) >= 1 && (f[0] == "module" || f[0] == "scratch"):
			c.Problems = append(c.Problems, strings.Join(f, " "))
		}
	}
	if running != "" {
		c.Cells[running] = Cell{Exit: -1}
		c.Problems = append(c.Problems, fmt.Sprintf("suite %q never finished", running))
	}
	if !c.Ended {
		c.Problems = append(c.Problems, "no end marker: the guest died or hung before guest.sh finished")
	}
	for _, l := range tail {
		if strings.Contains(l, "Kernel panic") {
			c.Problems = append(c.Problems, "kernel panic: "+strings.TrimSpace(l))
			break
		}
	}
	if c.Failed() {
		c.Tail = tail
	}
	return c
}
