package nsrun

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// ProxyPort is the port of the proxy listener on the agent's loopback
// (127.0.0.1) when its network is "proxy".
const ProxyPort = 3128

// The proxy listener crosses like this: with network "proxy", init, in the
// agent's new network namespace with its loopback up, creates a TCP socket
// listening on 127.0.0.1:ProxyPort, sends it to the supervisor with the
// Ready message (SCM_RIGHTS on the supervisor socket, attached to that
// message's bytes), and closes its own copy before Go. A socket belongs to
// the network namespace it was created in, so the supervisor accepts, in
// its own namespace, the connections the agent makes to its loopback: one
// relay between the agent and its destination, and nothing of layerseal's
// running inside the namespace. The agent stage was started before the
// socket existed and init's descriptors are close-on-exec, so the agent
// never holds the listener; it can connect to it, no more.

// proxyListen creates the listening socket in init's network namespace:
// close-on-exec, bound to 127.0.0.1:ProxyPort.
func proxyListen() (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("proxy listener: socket: %w", err)
	}
	addr := &unix.SockaddrInet4{Port: ProxyPort, Addr: [4]byte{127, 0, 0, 1}}
	if err := unix.Bind(fd, addr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("proxy listener: bind 127.0.0.1:%d in the agent's network: %w", ProxyPort, err)
	}
	if err := unix.Listen(fd, unix.SOMAXCONN); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("proxy listener: listen on 127.0.0.1:%d: %w", ProxyPort, err)
	}
	return fd, nil
}

// sendReady sends the Ready message on the supervisor socket (descriptor
// 3); with network "proxy" it creates the proxy listener, sends it with
// the message and closes it.
func sendReady(cfg *Config, ready *Ready) error {
	if cfg.Sandbox.Network != "proxy" {
		return sendReadyFD(ready, -1)
	}
	fd, err := proxyListen()
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return sendReadyFD(ready, fd)
}

// sendReadyFD sends the Ready message with the descriptor fd attached
// when it is not -1.
func sendReadyFD(ready *Ready, fd int) error {
	b, err := json.Marshal(message{Ready: ready})
	if err != nil {
		return err
	}
	b = append(b, '\n')
	var rights []byte
	if fd >= 0 {
		rights = unix.UnixRights(fd)
	}
	for len(b) > 0 {
		n, err := unix.SendmsgN(3, b, rights, nil, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("send ready: %w", err)
		}
		b, rights = b[n:], nil
	}
	return nil
}

// rightsReader reads the supervisor's end of the socket with recvmsg,
// keeping the descriptors that arrive with the bytes (close-on-exec) until
// take, and closing any that arrive after it.
type rightsReader struct {
	f     *os.File
	fds   []int
	taken bool
}

func (r *rightsReader) Read(p []byte) (int, error) {
	rc, err := r.f.SyscallConn()
	if err != nil {
		return 0, err
	}
	oob := make([]byte, unix.CmsgSpace(4*4))
	var n, oobn, flags int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		for {
			n, oobn, flags, _, rerr = unix.Recvmsg(int(fd), p, oob, unix.MSG_CMSG_CLOEXEC)
			if !errors.Is(rerr, unix.EINTR) {
				return true
			}
		}
	})
	if err != nil {
		return 0, err
	}
	if rerr != nil {
		return 0, rerr
	}
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err == nil {
			for i := range msgs {
				if fds, err := unix.ParseUnixRights(&msgs[i]); err == nil {
					if r.taken {
						closeFDs(fds)
					} else {
						r.fds = append(r.fds, fds...)
					}
				}
			}
		}
	}
	if flags&unix.MSG_CTRUNC != 0 {
		return 0, errors.New("read from init: descriptors were cut off")
	}
	if n == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

// take returns the descriptors received so far and forgets them; those
// received later are closed.
func (r *rightsReader) take() []int {
	fds := r.fds
	r.fds, r.taken = nil, true
	return fds
}

// takeProxyListener turns the descriptor that came with the Ready message
// into the proxy listener when the network is "proxy". Any other
// descriptor received is closed.
func (r *Run) takeProxyListener() error {
	fds := r.rights.take()
	if r.network != "proxy" {
		closeFDs(fds)
		return nil
	}
	if len(fds) != 1 {
		closeFDs(fds)
		return fmt.Errorf("init sent %d descriptors with ready, want the proxy listener", len(fds))
	}
	f := os.NewFile(uintptr(fds[0]), "proxy-listener")
	l, err := net.FileListener(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("proxy listener from init: %w", err)
	}
	if _, ok := l.(*net.TCPListener); !ok {
		l.Close()
		return fmt.Errorf("proxy listener from init: a %T, not a TCP listener", l)
	}
	r.proxy = l
	return nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// ProxyListener returns the listener on 127.0.0.1:ProxyPort inside the
// agent's network namespace, once Ready has returned, when the network is
// "proxy" (nil otherwise). Its connections are those the agent makes to
// that address; the caller serves them, from its own network namespace,
// with a proxy (package egress). Wait and Abort close it.
func (r *Run) ProxyListener() net.Listener { return r.proxy }

// closeProxy closes the proxy listener, if any, and any descriptor init
// sent that was not taken.
func (r *Run) closeProxy() {
	closeFDs(r.rights.take())
	if r.proxy != nil {
		r.proxy.Close()
	}
}
