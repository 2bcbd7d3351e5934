// Command log measures the transparency log's costs on the POSIX driver:
// what anchoring adds to the end of a run (open the log, append the
// statement's head and two checkpoint heads, wait for a checkpoint that
// commits to them, write the receipts, close), 50 sessions ending at once
// (50 processes, each timing its own receipt), and `log check` of a log
// of 100,000 heads.
//
// Usage: go run ./bench/log [-runs 20] [-sessions 50] [-heads 100000]
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/tlog"
)

func main() {
	klog.SetLogger(logr.Discard())
	if len(os.Args) == 3 && os.Args[1] == "-child" {
		os.Exit(child(os.Args[2]))
	}
	runs := flag.Int("runs", 20, "anchorings timed one after another")
	sessions := flag.Int("sessions", 50, "processes anchoring at once")
	heads := flag.Int("heads", 100000, "heads in the log that log check reads")
	flag.Parse()
	tmp, err := os.MkdirTemp("", "bench-log-")
	check(err)
	defer os.RemoveAll(tmp)
	ctx := context.Background()
	key := filepath.Join(tmp, "seal.key")
	_, err = attest.GenerateKey(attest.AlgEd25519, key, key+".pub")
	check(err)
	signer, err := attest.LoadPrivateKey(key)
	check(err)
	logKey := filepath.Join(tmp, "log.key")
	vkey, err := tlog.GenerateKey(logKey, "bench.example/log")
	check(err)
	dir := filepath.Join(tmp, "log")
	_, err = tlog.InitPOSIX(ctx, dir, logKey)
	check(err)
	seq := 0
	session := func() string {
		out := filepath.Join(tmp, fmt.Sprintf("out%d", seq))
		check(os.MkdirAll(filepath.Join(out, "checkpoints"), 0o755))
		check(os.WriteFile(filepath.Join(out, "statement.head.json"), head(signer, seq, 0), 0o644))
		for c := 1; c <= 2; c++ {
			check(os.WriteFile(filepath.Join(out, "checkpoints", fmt.Sprintf("%06d.head.json", c)), head(signer, seq, c), 0o644))
		}
		seq++
		return out
	}

	// 1. Anchoring at the end of a run, one session at a time: spaced
	// like runs are (the log's last checkpoint older than tessera's
	// 100 ms least checkpoint interval), then back to back.
	for _, gap := range []time.Duration{250 * time.Millisecond, 0} {
		var ds []time.Duration
		for range *runs {
			out := session()
			time.Sleep(gap)
			start := time.Now()
			anchor(ctx, dir, out)
			ds = append(ds, time.Since(start))
		}
		slices.Sort(ds)
		fmt.Printf("anchoring one run (3 heads), %d runs %v apart: median %d ms, max %d ms (goal: at most 300 ms)\n",
			len(ds), gap, ds[len(ds)/2].Milliseconds(), ds[len(ds)-1].Milliseconds())
	}

	// 2. Sessions ending together, each a process of its own.
	var outs []string
	for range *sessions {
		outs = append(outs, session())
	}
	var cmds []*exec.Cmd
	var stdouts []*bytes.Buffer
	start := time.Now()
	for _, out := range outs {
		c := exec.Command(os.Args[0], "-child", dir+","+out)
		var b bytes.Buffer
		c.Stdout, c.Stderr = &b, os.Stderr
		check(c.Start())
		cmds, stdouts = append(cmds, c), append(stdouts, &b)
	}
	var worst time.Duration
	for i, c := range cmds {
		check(c.Wait())
		ns, err := strconv.ParseInt(strings.TrimSpace(stdouts[i].String()), 10, 64)
		check(err)
		worst = max(worst, time.Duration(ns))
	}
	fmt.Printf("%d sessions ending at once, a process each: every one had its receipts within %d ms (process start to receipt; all done in %d ms; goal: within 2 s)\n",
		*sessions, worst.Milliseconds(), time.Since(start).Milliseconds())

	// 3. log check of a log of many heads.
	l, err := tlog.Open(ctx, dir, tlog.Options{BatchMaxAge: 50 * time.Millisecond})
	check(err)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4096)
	fillStart := time.Now()
	for i := range *heads - seq*3 {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_, err := l.Append(ctx, head(signer, 1_000_000+i, 0))
			check(err)
		})
	}
	wg.Wait()
	check(l.Close(ctx))
	fill := time.Since(fillStart)
	v, err := tlog.ParseVerifier(vkey)
	check(err)
	r, err := tlog.OpenReader(dir, v)
	check(err)
	start = time.Now()
	rep, err := tlog.Check(ctx, r, nil)
	check(err)
	fmt.Printf("log check of %d heads: %d ms (goal: at most 10 s; filling the log took %d ms)\n",
		rep.Checkpoint.Size, time.Since(start).Milliseconds(), fill.Milliseconds())
}

// child anchors one session ("DIR,OUT") and prints how long it took.
func child(arg string) int {
	start := time.Now()
	dir, out, _ := strings.Cut(arg, ",")
	anchor(context.Background(), dir, out)
	fmt.Println(int64(time.Since(start)))
	return 0
}

// anchor is what run --log does at the end of a run.
func anchor(ctx context.Context, dir, out string) {
	l, err := tlog.Open(ctx, dir, tlog.Options{})
	check(err)
	_, err = tlog.Anchor(ctx, l, out)
	check(err)
	check(l.Close(ctx))
}

func head(s *attest.Signer, session, seq int) []byte {
	h := &attest.Head{Kind: attest.HeadKindStatement, SessionID: fmt.Sprintf("%032x", session), Launch: bytes.Repeat([]byte{1}, 32),
		Alg: attest.AlgEd25519, Root: bytes.Repeat([]byte{2}, 32), AppliedRoot: bytes.Repeat([]byte{2}, 32), Complete: true}
	if seq > 0 {
		h.Kind, h.Seq, h.CheckpointHead = attest.HeadKindCheckpoint, uint64(seq), bytes.Repeat([]byte{3}, 32)
	}
	b, err := attest.SignHead(s, h)
	check(err)
	return b
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/log:", err)
		os.Exit(1)
	}
}
