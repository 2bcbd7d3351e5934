package nsrun

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/moby/sys/mountinfo"

	"github.com/layerseal/layerseal/attest"
)

// audit compares the mount table at the end of the run with the one taken
// before the agent started. It looks at mounts at or under the workspace and
// at the masks over hidden paths: any mount there that is new, gone or
// changed (type, source, options, place) is a finding. The overlay and the
// masks themselves, unchanged, are not.
func audit(workspace string, masks []string, before, after []*mountinfo.Info) []MountFinding {
	watched := func(mp string) bool {
		return attest.Within(mp, workspace) || slices.Contains(masks, mp)
	}
	overlayID := topAt(before, workspace)
	old := map[int]*mountinfo.Info{}
	for _, in := range before {
		if watched(in.Mountpoint) {
			old[in.ID] = in
		}
	}
	var out []MountFinding
	add := func(mp, format string, a ...any) {
		out = append(out, MountFinding{Path: relPath(workspace, mp), Detail: fmt.Sprintf(format, a...)})
	}
	seen := map[int]bool{}
	for _, in := range after {
		if !watched(in.Mountpoint) {
			continue
		}
		b, ok := old[in.ID]
		switch {
		case !ok:
			add(in.Mountpoint, "mount %d: %s %q mounted on %q by the agent", in.ID, in.FSType, in.Source, in.Mountpoint)
		case !sameMount(b, in):
			what := "mount"
			if in.ID == overlayID {
				what = "workspace overlay"
			}
			add(in.Mountpoint, "%s %d changed: %s", what, in.ID, describeChange(b, in))
		}
		seen[in.ID] = true
	}
	for id, b := range old {
		if seen[id] {
			continue
		}
		if id == overlayID {
			add(b.Mountpoint, "workspace overlay %d on %q was unmounted", id, b.Mountpoint)
		} else {
			add(b.Mountpoint, "mount %d: %s on %q was unmounted", id, b.FSType, b.Mountpoint)
		}
	}
	slices.SortFunc(out, func(a, b MountFinding) int {
		return cmp.Or(cmp.Compare(a.Path, b.Path), cmp.Compare(a.Detail, b.Detail))
	})
	return out
}

// topAt returns the ID of the topmost mount on path, or -1.
func topAt(infos []*mountinfo.Info, path string) int {
	id := -1
	for _, in := range infos {
		if in.Mountpoint == path && (id == -1 || in.Parent == id) {
			id = in.ID
		}
	}
	return id
}

// relPath is mp relative to the workspace, or empty outside it.
func relPath(workspace, mp string) attest.Path {
	if mp == workspace {
		return attest.Root
	}
	if rest, ok := strings.CutPrefix(mp, workspace+"/"); ok {
		return attest.Path(rest)
	}
	return ""
}

func sameMount(a, b *mountinfo.Info) bool {
	return a.ID == b.ID && a.Parent == b.Parent && a.Major == b.Major && a.Minor == b.Minor &&
		a.Root == b.Root && a.Mountpoint == b.Mountpoint && a.Options == b.Options &&
		a.FSType == b.FSType && a.Source == b.Source && a.VFSOptions == b.VFSOptions
}

func describeChange(a, b *mountinfo.Info) string {
	var d []string
	field := func(name, x, y string) {
		if x != y {
			d = append(d, fmt.Sprintf("%s %q -> %q", name, x, y))
		}
	}
	field("type", a.FSType, b.FSType)
	field("source", a.Source, b.Source)
	field("mount point", a.Mountpoint, b.Mountpoint)
	field("root", a.Root, b.Root)
	field("mount options", a.Options, b.Options)
	field("super options", a.VFSOptions, b.VFSOptions)
	field("parent", fmt.Sprint(a.Parent), fmt.Sprint(b.Parent))
	field("device", fmt.Sprintf("%d:%d", a.Major, a.Minor), fmt.Sprintf("%d:%d", b.Major, b.Minor))
	return strings.Join(d, ", ")
}
