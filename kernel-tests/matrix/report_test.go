package main

import (
	"slices"
	"testing"
)

// TestKernelIndependentRow: the row says which pass left the
// kernel-independent tests out, so a host column whose plain pass is go
// test in full does not read as never running them.
func TestKernelIndependentRow(t *testing.T) {
	const list = "cmd-layerseal ^(TestA)$"
	cols := []*Column{
		{Name: "host", Reports: map[string]map[string]string{"nostatx": {"kernel-independent": list}}},
		{Name: "5.10", Reports: map[string]map[string]string{"plain": {"kernel-independent": list}, "nostatx": {"kernel-independent": list}}},
		{Name: "6.1", Reports: map[string]map[string]string{"plain": {"kernel-independent": list}}},
		{Name: "none"},
	}
	want := []string{list + " (nostatx pass only)", list, list + " (plain pass only)", "-"}
	for _, l := range lines(cols) {
		if l[1] == "not run: kernel-independent" {
			if got := l[2:]; !slices.Equal(got, want) {
				t.Errorf("row = %q, want %q", got, want)
			}
			return
		}
	}
	t.Fatal("no kernel-independent row")
}
