package layerseal

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
)

// logDrain is how long the supervisor waits, once init has exited, for the
// last of the agent's output to reach the log files.
const logDrain = 5 * time.Second

// outputLog keeps the agent's stdout and stderr as files in a log dir
// (RunConfig.LogOutput) while passing them on to where they went before:
// the agent writes into pipes, and the supervisor copies each pipe both to
// its file and to the original stream. The agent's stdout and stderr are
// then pipes, never a terminal, even when the operator's are; a terminal
// stdin still gets the agent its own pseudo-terminal (see nsrun.Start),
// whose echo goes to the operator's terminal and is not logged.
//
// A failed write to a file (a full disk) stops that file, which the
// statement then records as truncated; the copy to the original stream goes
// on, so the agent is never blocked or killed by its log.
type outputLog struct {
	streams []*logStream
}

type logStream struct {
	name   string
	r, w   *os.File // the pipe: the agent writes w
	to     *os.File // where the output went before
	file   *os.File // the log file; nil after a failed write
	h      hash.Hash
	size   uint64
	trunc  bool
	failed error // the write that failed
	done   chan struct{}
}

// prepareLogDir checks the log dir of a session: not inside the workspace,
// the output dir or the state dir, and either absent (it is then made, 0700)
// or an empty directory that is not a symlink. It returns the dir opened.
func prepareLogDir(dir, ws, out, stateDir string) (*os.File, error) {
	given := absOrSelf(dir)
	if fi, err := os.Lstat(given); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		return nil, fmt.Errorf("log dir %q is a symlink: give the directory itself", dir)
	}
	abs := evalOrSelf(given)
	if attest.Within(abs, ws) {
		return nil, fmt.Errorf("log dir %q is inside the workspace %q: the agent could reach it; choose a directory outside", dir, ws)
	}
	for _, c := range []struct{ what, p string }{{"output dir", out}, {"state dir", stateDir}} {
		if p := evalOrSelf(absOrSelf(c.p)); abs == p || attest.Within(abs, p) || attest.Within(p, abs) {
			return nil, fmt.Errorf("log dir %q overlaps the %s %q: give a directory of its own", dir, c.what, c.p)
		}
	}
	if err := os.Mkdir(given, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("log dir %q: %w", dir, unwrapPath(err))
	}
	fd, err := linux.Openat(unix.AT_FDCWD, given, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW)
	if err != nil {
		return nil, fmt.Errorf("log dir %q is not a directory (a symlink is refused): %w", dir, unwrapPath(err))
	}
	names, err := linux.ReadDirNames(fd)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("log dir %q: %w", dir, err)
	}
	if len(names) > 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("log dir %q is not empty: give a new or empty directory, so that the logs are this run's alone", dir)
	}
	return os.NewFile(uintptr(fd), abs), nil
}

// startOutputLog creates stdout and stderr in dir (0600, refusing anything
// already there) and the pipes the agent writes into; it returns the
// agent's stdout and stderr. The caller closes those once init has them
// (closeAgentEnds) and calls finish after the run.
func startOutputLog(dir *os.File, stdout, stderr *os.File) (*outputLog, *os.File, *os.File, error) {
	l := &outputLog{}
	for _, s := range []struct {
		name string
		to   *os.File
	}{{attest.StdoutLog, stdout}, {attest.StderrLog, stderr}} {
		fd, err := linux.Openat(int(dir.Fd()), s.name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW)
		if err == nil {
			err = unix.Fchmod(fd, 0o600)
		}
		if err != nil {
			l.abort()
			return nil, nil, nil, fmt.Errorf("create log %q: %w", filepath.Join(dir.Name(), s.name), err)
		}
		ls := &logStream{name: s.name, file: os.NewFile(uintptr(fd), s.name), h: sha256.New(), done: make(chan struct{})}
		if s.to != nil {
			// A copy above 2: Go turns a broken pipe on descriptors 1 and 2
			// into SIGPIPE for the whole process; here it is an error.
			tfd, err := unix.FcntlInt(s.to.Fd(), unix.F_DUPFD_CLOEXEC, 3)
			if err != nil {
				ls.file.Close()
				l.abort()
				return nil, nil, nil, fmt.Errorf("duplicate the %s descriptor: %w", s.name, err)
			}
			ls.to = os.NewFile(uintptr(tfd), s.to.Name())
		}
		if ls.r, ls.w, err = os.Pipe(); err != nil {
			ls.file.Close()
			l.abort()
			return nil, nil, nil, fmt.Errorf("pipe for the agent's %s: %w", s.name, err)
		}
		l.streams = append(l.streams, ls)
	}
	for _, s := range l.streams {
		go s.copy()
	}
	return l, l.streams[0].w, l.streams[1].w, nil
}

// abort closes what startOutputLog opened before it failed.
func (l *outputLog) abort() {
	for _, s := range l.streams {
		s.file.Close()
		s.r.Close()
		s.w.Close()
		if s.to != nil {
			s.to.Close()
		}
	}
}

// discard ends the copies and removes the log files, when the agent never
// started: the log dir can be used again.
func (l *outputLog) discard(dir *os.File) {
	l.closeAgentEnds()
	l.finish()
	for _, s := range l.streams {
		_ = linux.Unlinkat(int(dir.Fd()), s.name, 0)
	}
}

// closeAgentEnds closes the supervisor's copies of the pipes' write ends,
// so that the copies end when the agent's side closes.
func (l *outputLog) closeAgentEnds() {
	for _, s := range l.streams {
		s.w.Close()
	}
}

// copy passes what the agent writes on to the original stream and the file
// until the pipe is closed. Output to a terminal in raw mode (the operator's,
// while the agent has a pseudo-terminal) gets a carriage return before each
// newline, as the terminal would have added.
func (s *logStream) copy() {
	defer close(s.done)
	buf := make([]byte, 64<<10)
	for {
		n, err := s.r.Read(buf)
		if n > 0 {
			s.write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

func (s *logStream) write(b []byte) {
	if s.to != nil {
		out := b
		if t, err := unix.IoctlGetTermios(int(s.to.Fd()), unix.TCGETS); err == nil && t.Oflag&unix.OPOST == 0 {
			out = bytes.ReplaceAll(b, []byte("\n"), []byte("\r\n"))
		}
		if _, err := s.to.Write(out); err != nil {
			// The reader went away (a closed pipe or terminal): the log
			// goes on alone.
			s.to.Close()
			s.to = nil
		}
	}
	if s.file == nil {
		s.trunc = true
		return
	}
	n, err := s.file.Write(b)
	s.h.Write(b[:n])
	s.size += uint64(n)
	if err != nil {
		s.failed, s.trunc = err, true
		s.file.Close()
		s.file = nil
	}
}

// finish waits (up to logDrain) for the copies to end, syncs and closes the
// files, and returns what the statement records of them, with a line for
// each log that is incomplete.
func (l *outputLog) finish() ([]attest.OutputLog, []string) {
	deadline := time.After(logDrain)
	var notes []string
	for _, s := range l.streams {
		select {
		case <-s.done:
		case <-deadline:
			// Something still holds the pipe's write end: stop copying.
			s.r.Close()
			<-s.done
			s.trunc = true
			notes = append(notes, fmt.Sprintf("log %s: the agent's %s was still open %v after the run; the log stops there", s.name, s.name, logDrain))
		}
		s.r.Close()
		if s.to != nil {
			s.to.Close()
		}
		if s.file != nil {
			if err := s.file.Sync(); err != nil && s.failed == nil {
				s.failed, s.trunc = err, true
			}
			s.file.Close()
		}
		if s.failed != nil {
			notes = append(notes, fmt.Sprintf("log %s is truncated after %d bytes (%v); the statement records it so", s.name, s.size, s.failed))
		}
	}
	var out []attest.OutputLog
	for _, name := range []string{attest.StderrLog, attest.StdoutLog} {
		for _, s := range l.streams {
			if s.name == name {
				out = append(out, attest.OutputLog{Name: s.name, Size: s.size, SHA256: s.h.Sum(nil), Truncated: s.trunc})
			}
		}
	}
	return out, notes
}

// CheckLogs checks the log files in dir (as run --log-output left them)
// against what st records: for each log, nil or the error of
// attest.OutputLog.Check (wrapping attest.ErrNotVerified when the file
// differs), or the error opening it; a symlink is not followed. It fails
// when st records no logs.
func CheckLogs(dir string, st *attest.Statement) (map[string]error, error) {
	if len(st.Logs) == 0 {
		return nil, errors.New("the statement records no logs: the run did not keep its output (run --log-output)")
	}
	dfd, err := linux.Openat(unix.AT_FDCWD, dir, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, fmt.Errorf("log dir %q: %w", dir, unwrapPath(err))
	}
	defer unix.Close(dfd)
	out := map[string]error{}
	for _, l := range st.Logs {
		fd, err := linux.Openat(dfd, l.Name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK)
		if err != nil {
			out[l.Name] = fmt.Errorf("open log %q: %w", l.Name, unwrapPath(err))
			continue
		}
		f := os.NewFile(uintptr(fd), l.Name)
		if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
			out[l.Name] = fmt.Errorf("log %q is not a regular file", l.Name)
		} else {
			out[l.Name] = l.Check(f)
		}
		f.Close()
	}
	return out, nil
}
