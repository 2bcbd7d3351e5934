package probe

import (
	"reflect"
	"slices"
	"testing"
)

// all returns Features with every item at s.
func all(s Status) Features {
	fd := Finding{Status: s, Detail: "test"}
	f := Features{
		KernelRelease:      "test",
		StatxMountID:       fd,
		StatxMountIDUnique: fd,
		Openat2:            fd,
		Overlay:            fd,
		OverlayPinned:      fd,
		UserXattr:          fd,
		OverlayParams:      map[string]string{"index": "N"},
	}
	for _, o := range PinnedOverlayOptions {
		f.OverlayOptions = append(f.OverlayOptions, OptionFinding{Option: o, Finding: fd})
	}
	return f
}

// items names every finding of f, options as "option OPT".
func items(f Features) map[string]Finding {
	m := map[string]Finding{
		"statx_mnt_id":        f.StatxMountID,
		"statx_mnt_id_unique": f.StatxMountIDUnique,
		"openat2":             f.Openat2,
		"overlay":             f.Overlay,
		"overlay_pinned":      f.OverlayPinned,
		"userxattr":           f.UserXattr,
	}
	for _, o := range f.OverlayOptions {
		m["option "+o.Option] = o.Finding
	}
	return m
}

func TestWithout(t *testing.T) {
	everyOption := []string{"overlay", "overlay_pinned", "userxattr"}
	for _, o := range PinnedOverlayOptions {
		everyOption = append(everyOption, "option "+o)
	}
	for name, removed := range map[string][]string{
		"no-statx-mnt-id":        {"statx_mnt_id", "statx_mnt_id_unique"},
		"no-statx-mnt-id-unique": {"statx_mnt_id_unique"},
		"no-openat2":             {"openat2"},
		"no-overlay":             everyOption,
		"no-userxattr":           {"userxattr"},
		"no-option:uuid=null":    {"option uuid=null", "overlay_pinned"},
		"no-option:xino=off":     {"option xino=off", "overlay_pinned"},
	} {
		g, err := all(Yes).Without(name)
		if err != nil {
			t.Fatalf("Without(%q): %v", name, err)
		}
		for item, fd := range items(g) {
			want := Finding{Status: Yes, Detail: "test"}
			if slices.Contains(removed, item) {
				want = Finding{Status: No, Detail: "simulated: " + name}
			}
			if fd != want {
				t.Errorf("Without(%q): %s = %+v, want %+v", name, item, fd, want)
			}
		}
		if !slices.Equal(g.Simulated, []string{name}) {
			t.Errorf("Without(%q): Simulated = %q", name, g.Simulated)
		}
	}
}

// TestWithoutOnlyRemoves checks the promise that a simulation never makes a
// feature more available, from every starting status.
func TestWithoutOnlyRemoves(t *testing.T) {
	rank := map[Status]int{No: 0, Unknown: 1, Yes: 2}
	for _, start := range []Status{Yes, No, Unknown} {
		for _, name := range Simulations() {
			f := all(start)
			g, err := f.Without(name)
			if err != nil {
				t.Fatalf("Without(%q): %v", name, err)
			}
			before := items(f)
			for item, fd := range items(g) {
				if rank[fd.Status] > rank[before[item].Status] {
					t.Errorf("Without(%q) from %s raised %s to %s", name, start, item, fd.Status)
				}
			}
		}
	}
}

func TestWithoutKeepsOriginal(t *testing.T) {
	f := all(Yes)
	f.Simulated = []string{"no-openat2"}
	orig := all(Yes)
	orig.Simulated = []string{"no-openat2"}
	g, err := f.Without("no-overlay", "no-openat2", "no-overlay")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f, orig) {
		t.Errorf("Without changed its receiver: %+v", f)
	}
	if want := []string{"no-openat2", "no-overlay"}; !slices.Equal(g.Simulated, want) {
		t.Errorf("Simulated = %q, want %q", g.Simulated, want)
	}
}

func TestWithoutUnknownName(t *testing.T) {
	f := all(Yes)
	g, err := f.Without("no-openat2", "no-option:volatile")
	if err == nil {
		t.Fatal("Without accepted an unknown simulation")
	}
	if !reflect.DeepEqual(g, f) {
		t.Errorf("Without changed features despite the error: %+v", g)
	}
}

func TestParseSimulate(t *testing.T) {
	got, err := ParseSimulate(" no-openat2, ,no-option:uuid=null,")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"no-openat2", "no-option:uuid=null"}; !slices.Equal(got, want) {
		t.Errorf("ParseSimulate = %q, want %q", got, want)
	}
	if got, err := ParseSimulate(""); err != nil || got != nil {
		t.Errorf("ParseSimulate(\"\") = %q, %v", got, err)
	}
	for _, bad := range []string{"no-statx", "NO-OPENAT2", "no-openat2,x"} {
		if _, err := ParseSimulate(bad); err == nil {
			t.Errorf("ParseSimulate(%q) accepted it", bad)
		}
	}
}

func TestSimulationsSortedAndParseable(t *testing.T) {
	names := Simulations()
	if !slices.IsSorted(names) {
		t.Errorf("Simulations not sorted: %q", names)
	}
	for _, n := range names {
		if _, err := all(Yes).Without(n); err != nil {
			t.Errorf("Without(%q): %v", n, err)
		}
	}
}
