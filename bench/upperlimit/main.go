// Command upperlimit measures how far past its limit an agent that writes
// as fast as it can gets before layerseal stops it: the watcher lets at
// most one interval of writes (and the kill's latency) through, and this
// prints what that is. For each workload and limit it runs `layerseal run
// --max-upper LIMIT` (rows "max-upper") and, with the state dir on a tmpfs
// of LIMIT + 256 MiB, `--min-free 256MiB` (rows "reserve"), with an agent
// that writes zeros until it is killed (bounded at twice the limit plus
// 64 MiB), either appending 1 MiB at a time to one file ("one file") or
// writing 64 KiB files ("64KiB files", so the walk has more to stat).
//
// The agent (this program, run inside the sandbox) logs after every write
// the time and the bytes written so far to a file in a --rw dir. Columns:
// the limit; the disk space the upper and work dirs take once the run
// ended (median of the rounds); the overshoot, that minus the limit
// (median and largest); how long the agent's writes went on after it
// had written the limit (median and largest: the watcher's interval plus
// the kill's latency); the agent's write rate; and in how many runs the
// agent ended (its writes done, or the filesystem full) before it was
// stopped ("late").
//
// Needs root and go. Sessions use scratch dirs under /var/lib (the
// default state dir's filesystem), removed at the end.
//
// Usage: go run ./bench/upperlimit [-rounds 5] [-limits 8MiB,64MiB,256MiB,1GiB]
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/policy"
	"github.com/layerseal/layerseal/probe"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "agent" {
		agent(os.Args[2:])
		return
	}
	rounds := flag.Int("rounds", 5, "runs per row")
	limits := flag.String("limits", "8MiB,64MiB,256MiB,1GiB", "comma-separated limits")
	flag.Parse()
	if err := bench(*rounds, strings.Split(*limits, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "bench/upperlimit:", err)
		os.Exit(1)
	}
}

// agent writes zeros into the working directory: mode "file" appends
// chunks of 1 MiB to one file, mode "files" writes files of 64 KiB; up to
// max bytes. After each write it appends its time and the bytes written
// so far (two little-endian int64s) to the log file.
func agent(args []string) {
	mode, logPath := args[0], args[1]
	max, _ := strconv.ParseInt(args[2], 10, 64)
	log, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		panic(err)
	}
	chunk := 1 << 20
	if mode == "files" {
		chunk = 64 << 10
	}
	buf := make([]byte, chunk)
	var rec [16]byte
	var f *os.File
	for n, i := int64(0), 0; n < max; i++ {
		if mode == "files" || f == nil {
			if f != nil {
				f.Close()
			}
			if f, err = os.Create(fmt.Sprintf("f%06d", i)); err != nil {
				panic(err)
			}
		}
		if _, err := f.Write(buf); err != nil {
			panic(err)
		}
		n += int64(chunk)
		binary.LittleEndian.PutUint64(rec[:8], uint64(time.Now().UnixNano()))
		binary.LittleEndian.PutUint64(rec[8:], uint64(n))
		log.Write(rec[:])
	}
}

type result struct {
	upper int64         // bytes the upper and work dirs take after the run
	past  time.Duration // writes after the limit was written
	rate  float64       // bytes per second
	late  bool          // the agent ended before it was stopped
}

func bench(rounds int, limits []string) error {
	tmp, err := os.MkdirTemp("/var/lib", "layerseal-bench-upper.")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin, self := filepath.Join(tmp, "agent", "layerseal"), filepath.Join(tmp, "agent", "upperlimit")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return err
	}
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/layerseal").CombinedOutput(); err != nil {
		return fmt.Errorf("build layerseal: %v\n%s", err, out)
	}
	if out, err := exec.Command("go", "build", "-o", self, "./bench/upperlimit").CombinedOutput(); err != nil {
		return fmt.Errorf("build the agent: %v\n%s", err, out)
	}
	key := filepath.Join(tmp, "key")
	if out, err := exec.Command(bin, "keygen", "--out", key).CombinedOutput(); err != nil {
		return fmt.Errorf("keygen: %v\n%s", err, out)
	}
	fmt.Printf("%d rounds, %d cores; the agent writes zeros until stopped\n", rounds, runtime())
	fmt.Printf("%-9s %-12s %9s %12s %22s %22s %10s %5s\n", "limit", "workload", "stop", "upper MiB", "overshoot MiB med/max", "past limit ms med/max", "rate MB/s", "late")
	n := 0
	for _, l := range limits {
		limit, err := policy.ParseSize(l)
		if err != nil {
			return err
		}
		for _, row := range []struct{ stop, mode, name string }{
			{"max-upper", "file", "one file"}, {"max-upper", "files", "64KiB files"}, {"reserve", "file", "one file"},
		} {
			var rs []result
			for range rounds {
				n++
				r, err := runOnce(bin, self, key, filepath.Join(tmp, fmt.Sprint("r", n)), filepath.Join(tmp, "agent", fmt.Sprint("progress", n)), row.stop, row.mode, limit)
				if err != nil {
					return fmt.Errorf("%s, %s, limit %s: %w", row.stop, row.name, l, err)
				}
				rs = append(rs, r)
			}
			ups := collect(rs, func(r result) float64 { return float64(r.upper) })
			overs := collect(rs, func(r result) float64 { return float64(r.upper - limit) })
			pasts := collect(rs, func(r result) float64 { return r.past.Seconds() * 1000 })
			rates := collect(rs, func(r result) float64 { return r.rate })
			late := 0
			for _, r := range rs {
				if r.late {
					late++
				}
			}
			fmt.Printf("%-9s %-12s %9s %12.1f %10.1f / %9.1f %10.1f / %9.1f %10.0f %5d\n", l, row.name, row.stop,
				median(ups)/(1<<20), median(overs)/(1<<20), slices.Max(overs)/(1<<20), median(pasts), slices.Max(pasts), median(rates)/1e6, late)
		}
	}
	return nil
}

// runOnce runs one session in dir, the agent logging to progress, and
// returns what it measured.
func runOnce(bin, self, key, dir, progress, stop, mode string, limit int64) (result, error) {
	ws, state, out := filepath.Join(dir, "ws"), filepath.Join(dir, "state"), filepath.Join(dir, "out")
	for _, d := range []string{ws, state} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return result{}, err
		}
	}
	defer os.RemoveAll(dir)
	flags := []string{"--max-upper", fmt.Sprint(limit)}
	if stop == "reserve" {
		const reserve = 256 << 20
		if err := unix.Mount("tmpfs", state, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", limit+reserve)); err != nil {
			return result{}, fmt.Errorf("mount a tmpfs state dir: %w", err)
		}
		defer unix.Unmount(state, unix.MNT_DETACH)
		flags = []string{"--min-free", fmt.Sprint(reserve)}
	}
	defer os.Remove(progress)
	// The agent's binary and its progress log are in a dir it may write
	// (--rw), so it sees them whatever else of the host it is shown.
	args := append([]string{"run", "--workspace", ws, "--key", key, "--out", out, "--state-dir", state, "--stage", "--rw", filepath.Dir(progress)}, flags...)
	args = append(args, "--", self, "agent", mode, progress, fmt.Sprint(2*limit+64<<20))
	cmd := exec.Command(bin, args...)
	b, _ := cmd.CombinedOutput()
	code := cmd.ProcessState.ExitCode()
	if code != 128+int(unix.SIGKILL) && code != 0 && code != 2 || !strings.Contains(string(b), "layerseal itself succeeded") {
		return result{}, fmt.Errorf("layerseal failed (exit %d):\n%s", code, b)
	}
	// Exit 0: the agent wrote all it would before it was stopped; 2: it
	// hit a full filesystem.
	late := code != 128+int(unix.SIGKILL) || !strings.Contains(string(b), "incomplete: upper-limit")
	sessions, _ := filepath.Glob(filepath.Join(state, "sessions", "*"))
	if len(sessions) != 1 {
		return result{}, fmt.Errorf("%d sessions in the state dir", len(sessions))
	}
	u, err := probe.DiskUsage(filepath.Join(sessions[0], "upper"), filepath.Join(sessions[0], "work"))
	if err != nil {
		return result{}, err
	}
	recs, err := os.ReadFile(progress)
	if err != nil || len(recs) < 32 {
		return result{}, fmt.Errorf("the agent's progress: %d bytes, %v", len(recs), err)
	}
	at := func(i int) (time.Time, int64) {
		r := recs[16*i:]
		return time.Unix(0, int64(binary.LittleEndian.Uint64(r))), int64(binary.LittleEndian.Uint64(r[8:]))
	}
	last := len(recs)/16 - 1
	t0, _ := at(0)
	tEnd, written := at(last)
	var crossed time.Time
	for i := 0; i <= last; i++ {
		if t, n := at(i); n > limit {
			crossed = t
			break
		}
	}
	var past time.Duration
	if !crossed.IsZero() {
		past = tEnd.Sub(crossed)
	}
	rate := float64(written) / max(tEnd.Sub(t0).Seconds(), 1e-6)
	return result{upper: u.Bytes, past: past, rate: rate, late: late}, nil
}

func collect(rs []result, f func(result) float64) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = f(r)
	}
	return out
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func runtime() int {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) != nil {
		return 0
	}
	return set.Count()
}
