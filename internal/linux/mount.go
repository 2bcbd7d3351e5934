package linux

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// mountFlagNames are the mount(2) flags printed by name in errors.
var mountFlagNames = []struct {
	flag uintptr
	name string
}{
	{unix.MS_RDONLY, "MS_RDONLY"}, {unix.MS_NOSUID, "MS_NOSUID"}, {unix.MS_NODEV, "MS_NODEV"},
	{unix.MS_NOEXEC, "MS_NOEXEC"}, {unix.MS_REMOUNT, "MS_REMOUNT"}, {unix.MS_BIND, "MS_BIND"},
	{unix.MS_REC, "MS_REC"}, {unix.MS_PRIVATE, "MS_PRIVATE"}, {unix.MS_NOATIME, "MS_NOATIME"},
	{unix.MS_NODIRATIME, "MS_NODIRATIME"}, {unix.MS_RELATIME, "MS_RELATIME"},
	{unix.MS_STRICTATIME, "MS_STRICTATIME"},
}

// MountFlagString names the flags of mount(2), as "MS_BIND|MS_REC", or "0".
func MountFlagString(flags uintptr) string {
	var names []string
	for _, f := range mountFlagNames {
		if flags&f.flag != 0 {
			names = append(names, f.name)
			flags &^= f.flag
		}
	}
	if flags != 0 {
		names = append(names, fmt.Sprintf("%#x", flags))
	}
	if names == nil {
		return "0"
	}
	return strings.Join(names, "|")
}

// Mount calls mount(2). The error names the source, the type, the flags by
// name and the data.
func Mount(source, target, fstype string, flags uintptr, data string) error {
	err := ignoringEINTR(func() error { return unix.Mount(source, target, fstype, flags, data) })
	op := fmt.Sprintf("mount %q type %q flags %s data %q on", source, fstype, MountFlagString(flags), data)
	return pathErr(op, target, err)
}

// MountSetattr calls mount_setattr(2) on path (AT_FDCWD-relative), setting
// the MOUNT_ATTR_* bits set and clearing clr; recursive applies it to every
// mount below path too (AT_RECURSIVE). It fails with ENOSYS on kernels
// before 5.12.
func MountSetattr(path string, recursive bool, set, clr uint64) error {
	var flags uint
	if recursive {
		flags = unix.AT_RECURSIVE
	}
	attr := unix.MountAttr{Attr_set: set, Attr_clr: clr}
	err := ignoringEINTR(func() error { return unix.MountSetattr(unix.AT_FDCWD, path, flags, &attr) })
	return pathErr(fmt.Sprintf("mount_setattr set %#x clear %#x recursive %t", set, clr, recursive), path, err)
}
