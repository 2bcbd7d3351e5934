package main

import (
	"cmp"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// guestRun is one guest to boot: a kernel and what it runs there.
type guestRun struct {
	kernel string // the column it reports into, e.g. "5.10"
	name   string // its log's name: the kernel, or "5.10-nostatx"
	x      Extracted
	initrd string
	opt    guestOptions
}

// pass is one guest's share of a kernel's suites.
type pass struct {
	suffix string // after the kernel's name in the guest's name
	opt    guestOptions
}

// passes splits what a kernel runs into guests. A kernel that runs the
// nostatx pass too runs it in a second guest of its own: each pass takes
// about as long as a newer kernel's whole run, and one guest uses one
// core, so the two passes can fill both slots side by side rather than
// one after the other. An injected failure or panic stays in one guest:
// the self-check boots exactly what it checks.
func (o guestOptions) passes() []pass {
	if o.inject != "" || o.nostatx == "-" {
		return []pass{{"", o}}
	}
	plain, nostatx := o, o
	plain.nostatx = "-"
	nostatx.noPlain = true
	return []pass{{"", plain}, {"-nostatx", nostatx}}
}

// schedule orders guests longest first, so that the guest started last is
// a short one: by the seconds its suites took in the log the last run
// kept; where any guest has no such log, the plain passes (the longer)
// before the nostatx passes, in the kernels' order.
func schedule(guests []guestRun, cfg config) {
	slices.SortStableFunc(guests, func(a, b guestRun) int {
		return cmp.Compare(boolInt(a.opt.noPlain), boolInt(b.opt.noPlain))
	})
	secs := make(map[string]int, len(guests))
	for _, g := range guests {
		f, err := os.Open(filepath.Join(cfg.cache, "logs", cfg.logPrefix+g.name+".log"))
		if err != nil {
			return
		}
		c := parseLog(g.name, f)
		f.Close()
		if c.Failed() {
			return // a guest that died early says nothing of its length
		}
		for _, cell := range c.Cells {
			secs[g.name] += cell.Seconds
		}
	}
	slices.SortStableFunc(guests, func(a, b guestRun) int { return cmp.Compare(secs[b.name], secs[a.name]) })
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// inOrder calls f(0) to f(n-1), at most jobs at once, each starting in
// that order: the order schedule chose, so that the longest guests boot
// first (goroutines that each wait for a slot would take them in any order).
func inOrder(n, jobs int, f func(i int)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(jobs, 1))
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f(i)
		})
	}
	wg.Wait()
}
