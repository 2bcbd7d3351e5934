package layerseal

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
	"github.com/layerseal/layerseal/probe"
)

// The control channel of a running session is a unix socket in the
// session's state dir (0700, root, and masked in the agent's mount
// namespace like the whole state dir), itself 0600. A client writes one
// line naming a request ("checkpoint") and reads one JSON line back. The
// supervisor answers only peers with uid 0 (SO_PEERCRED).
const controlSocket = "control.sock"

func (d sessionDir) control() string { return filepath.Join(string(d), controlSocket) }

type controlReply struct {
	Result *CheckpointResult `json:"result,omitempty"`
	Error  string            `json:"error,omitempty"`
}

// checkpoints runs a session's checkpoint triggers: the interval, SIGUSR1
// to the supervisor, and the control socket. Errors of a checkpoint are
// logged and answered, never passed to the agent.
type checkpoints struct {
	cp   *checkpointer
	ln   *net.UnixListener
	sigs chan os.Signal
	stop chan struct{}
	wg   sync.WaitGroup
	log  func(format string, args ...any)
}

// startCheckpoints starts taking checkpoints of the running session. The
// returned stop ends that and waits for a checkpoint in progress.
func (s *session) startCheckpoints(id string) (*checkpoints, error) {
	dir, err := makeCheckpointDir(s.out)
	if err != nil {
		return nil, err
	}
	cp := &checkpointer{
		r: s.reader, key: s.cfg.Key, dir: dir,
		changes: filepath.Join(string(s.dir), checkpointChangesFile),
		egress:  s.egressRecords,
	}
	cp.base.SessionID, cp.base.Launch, cp.base.Workspace = id, sha(s.launch), attest.Bytes(s.ws)
	if stamped, err := s.mappedStamped(); err != nil || !stamped {
		cp.mappedUnseen = true
		why := "the state dir's filesystem does not stamp writes through shared mappings"
		if err != nil {
			why = err.Error()
		}
		s.log("checkpoints will walk and hash every file: %s", why)
	}
	c := &checkpoints{cp: cp, sigs: make(chan os.Signal, 1), stop: make(chan struct{}), log: s.log}
	if c.ln, err = listenControl(s.dir); err != nil {
		// The interval and SIGUSR1 still work; the session runs.
		s.log("checkpoint requests disabled: %v", err)
	}
	signal.Notify(c.sigs, unix.SIGUSR1)
	c.wg.Add(1)
	go c.loop(s.cfg.Policy.CheckpointEvery)
	if c.ln != nil {
		c.wg.Add(1)
		go c.serve()
	}
	return c, nil
}

// probeMapped starts probe.MappedWritesStamped on the session dir in the
// background: it waits out a clock tick (about probe.RacyWindow), which
// would otherwise delay the agent's start, and only checkpoints need its
// answer. mappedStamped waits for it.
func (s *session) probeMapped() {
	done := make(chan struct{})
	s.mapped = func() (bool, error) { <-done; return s.stamped, s.stampedErr }
	go func() {
		defer close(done)
		s.stamped, s.stampedErr = probe.MappedWritesStamped(string(s.dir))
	}()
}

// mappedStamped is what the probe started by probeMapped found; it waits
// for the probe, which leaves no file behind once it returns.
func (s *session) mappedStamped() (bool, error) {
	if s.mapped == nil {
		return false, errors.New("the state dir's filesystem was not probed")
	}
	return s.mapped()
}

// socketPath calls fn with a path naming d's control socket that fits a
// socket address (108 bytes) however long d is: through /proc/self/fd and
// a descriptor of d.
func socketPath(d sessionDir, fn func(string) error) error {
	fd, err := linux.Openat(unix.AT_FDCWD, string(d), unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return fmt.Errorf("session dir: %w", err)
	}
	defer linux.Close(fd)
	return fn(fmt.Sprintf("/proc/self/fd/%d/%s", fd, controlSocket))
}

func listenControl(d sessionDir) (*net.UnixListener, error) {
	var ln *net.UnixListener
	err := socketPath(d, func(p string) error {
		os.Remove(p)
		old := linux.Umask(0o177)
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
		linux.Umask(old)
		if err != nil {
			return err
		}
		l.SetUnlinkOnClose(false)
		ln = l
		return os.Chmod(d.control(), 0o600)
	})
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		return nil, fmt.Errorf("control socket: %w", err)
	}
	return ln, nil
}

func dialControl(d sessionDir) (*net.UnixConn, error) {
	var conn *net.UnixConn
	err := socketPath(d, func(p string) (err error) {
		conn, err = net.DialUnix("unix", nil, &net.UnixAddr{Name: p, Net: "unix"})
		return err
	})
	return conn, err
}

func (c *checkpoints) take(why string) (*CheckpointResult, error) {
	res, err := c.cp.take()
	if err != nil {
		c.log("checkpoint (%s) failed: %v", why, err)
		return nil, err
	}
	state := "changes listed"
	if res.Unchanged {
		state = "unchanged"
	}
	if !res.Complete {
		state += ", incomplete"
	}
	c.log("checkpoint %d (%s): %d change(s), %s, %s", res.Seq, why, res.Count, state, res.Took.Round(time.Millisecond))
	if res.HeadProblem != "" {
		c.log("%s", res.HeadProblem)
	}
	return res, nil
}

func (c *checkpoints) loop(every time.Duration) {
	defer c.wg.Done()
	var tick <-chan time.Time
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-c.stop:
			return
		case <-tick:
			c.take("interval")
		case <-c.sigs:
			c.take("SIGUSR1")
		}
	}
}

func (c *checkpoints) serve() {
	defer c.wg.Done()
	for {
		conn, err := c.ln.AcceptUnix()
		if err != nil {
			return
		}
		c.answer(conn)
	}
}

func (c *checkpoints) answer(conn *net.UnixConn) {
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var reply controlReply
	line, err := bufio.NewReader(conn).ReadString('\n')
	switch {
	case !peerIsRoot(conn):
		reply.Error = "only root may control a session"
	case err != nil:
		reply.Error = fmt.Sprintf("read request: %v", err)
	case line != "checkpoint\n":
		reply.Error = fmt.Sprintf("unknown request %q", line)
	default:
		reply.Result, err = c.take("request")
		if err != nil {
			reply.Error = err.Error()
		}
	}
	b, _ := json.Marshal(reply)
	conn.Write(append(b, '\n'))
}

func peerIsRoot(conn *net.UnixConn) bool {
	raw, err := conn.SyscallConn()
	if err != nil {
		return false
	}
	var uid uint32
	var uerr error
	if err := raw.Control(func(fd uintptr) { uid, uerr = linux.PeerUID(int(fd)) }); err != nil || uerr != nil {
		return false
	}
	return uid == 0
}

// end stops the triggers and waits for a checkpoint in progress; it
// returns the checkpointer for the final statement.
func (c *checkpoints) end() *checkpointer {
	signal.Stop(c.sigs)
	close(c.stop)
	if c.ln != nil {
		c.ln.Close()
	}
	c.wg.Wait()
	os.Remove(filepath.Join(filepath.Dir(c.cp.r.upper), controlSocket))
	return c.cp
}

// ErrNotRunning is returned by RequestCheckpoint when the session of an
// output dir is not running: it finished, or its supervisor is gone. An
// output dir of no session of the store is an error of its own.
var ErrNotRunning = errors.New("session is not running")

// RequestCheckpoint asks the running session whose output dir is out to
// take a checkpoint now, and waits for it.
func (s *Store) RequestCheckpoint(out string) (*CheckpointResult, error) {
	dir, _, err := s.find(out)
	if err != nil {
		return nil, err
	}
	conn, err := dialControl(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: output dir %q: no supervisor answers (%v)", ErrNotRunning, out, errors.Unwrap(err))
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("checkpoint\n")); err != nil {
		return nil, fmt.Errorf("checkpoint request: %w", err)
	}
	line, err := bufio.NewReader(conn).ReadBytes('\n')
	if err != nil {
		return nil, fmt.Errorf("%w: the supervisor closed the control socket without answering (the session ended?)", ErrNotRunning)
	}
	var reply controlReply
	if err := json.Unmarshal(line, &reply); err != nil {
		return nil, fmt.Errorf("checkpoint reply: %w", err)
	}
	if reply.Error != "" {
		return nil, fmt.Errorf("checkpoint: %s", reply.Error)
	}
	if reply.Result == nil {
		return nil, errors.New("checkpoint reply without a result")
	}
	return reply.Result, nil
}
