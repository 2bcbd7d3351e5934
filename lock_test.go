package layerseal

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/internal/linux"
)

func statOf(t *testing.T, p string) linux.Stat {
	t.Helper()
	st, err := linux.Lstat(unix.AT_FDCWD, p)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestWorkspaceLock: a held lock refuses the same workspace, one inside
// it, one above it and the same directory by another path, naming the
// holder; an unrelated workspace is fine; a released lock frees it.
func TestWorkspaceLock(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	ws := filepath.Join(dir, "ws")
	for _, d := range []string{ws + "/sub/deeper", dir + "/other"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(ws, dir+"/alias"); err != nil {
		t.Fatal(err)
	}
	held, err := OpenStore(state).lockWorkspace(ws, statOf(t, ws), "holder-session")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{ws, ws + "/sub", ws + "/sub/deeper", dir} {
		_, err := OpenStore(state).lockWorkspace(p, statOf(t, p), "second")
		if !errors.Is(err, ErrWorkspaceLocked) || !strings.Contains(err.Error(), "holder-session") {
			t.Errorf("lock %q while %q is held: %v", p, ws, err)
		}
	}
	// The same directory under another name (a bind mount would do the
	// same): refused by its identity.
	if _, err := OpenStore(state).lockWorkspace(dir+"/alias", statOf(t, ws), "second"); !errors.Is(err, ErrWorkspaceLocked) {
		t.Errorf("the same directory by another path: %v", err)
	}
	other, err := OpenStore(state).lockWorkspace(dir+"/other", statOf(t, dir+"/other"), "other")
	if err != nil {
		t.Fatalf("an unrelated workspace: %v", err)
	}
	other.release()
	held.release()
	again, err := OpenStore(state).lockWorkspace(ws+"/sub", statOf(t, ws+"/sub"), "after")
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	again.release()
}

// TestWorkspaceLockHolderDied: a lock whose holder died (here a child
// process that took it and was killed) frees itself.
// heldLock is the lock TestWorkspaceLockHolderDied's holder process keeps.
var heldLock *workspaceLock

func TestWorkspaceLockHolderDied(t *testing.T) {
	if os.Getenv("LAYERSEAL_TEST_LOCK_HOLD") != "" {
		args := strings.Split(os.Getenv("LAYERSEAL_TEST_LOCK_HOLD"), "\n")
		st, err := linux.Lstat(unix.AT_FDCWD, args[1])
		if err == nil {
			// Kept reachable: a lock dropped would let the collector's
			// finalizer close its descriptor, and free it, at any time.
			heldLock, err = OpenStore(args[0]).lockWorkspace(args[1], st, "dead-holder")
		}
		if err != nil {
			os.Stdout.WriteString("error: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Stdout.WriteString("held\n")
		select {}
	}
	dir := t.TempDir()
	state, ws := filepath.Join(dir, "state"), filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestWorkspaceLockHolderDied$")
	cmd.Env = append(os.Environ(), "LAYERSEAL_TEST_LOCK_HOLD="+state+"\n"+ws)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 200)
	n, _ := stdout.Read(buf)
	if !strings.HasPrefix(string(buf[:n]), "held") {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the holder: %q", buf[:n])
	}
	if _, err := OpenStore(state).lockWorkspace(ws, statOf(t, ws), "live"); !errors.Is(err, ErrWorkspaceLocked) || !strings.Contains(err.Error(), "dead-holder") {
		t.Errorf("while the holder lives: %v", err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	l, err := OpenStore(state).lockWorkspace(ws, statOf(t, ws), "after")
	if err != nil {
		t.Fatalf("after the holder died: %v", err)
	}
	l.release()
	if locks, _ := filepath.Glob(filepath.Join(state, locksDir, "*.lock")); len(locks) != 0 {
		t.Errorf("lock files left: %q", locks)
	}
}
