package privtest

import (
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"testing"
	"time"
)

// AbstractSockets listens on an abstract unix stream socket and binds an
// abstract datagram socket, both in the test's (the host's) network
// namespace, and returns their names ("@..." for package net) and a
// function that closes them and says what reached them, each message as
// "stream TEXT" or "dgram TEXT". The sockets are closed when t ends.
func AbstractSockets(t *testing.T) (stream, dgram string, heard func() []string) {
	t.Helper()
	stream = fmt.Sprintf("@layerseal-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	dgram = stream + "-dgram"
	l, err := net.Listen("unix", stream)
	if err != nil {
		t.Fatal(err)
	}
	d, err := net.ListenPacket("unixgram", dgram)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []string
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			b, _ := io.ReadAll(io.LimitReader(c, 64))
			c.Close()
			mu.Lock()
			got = append(got, "stream "+string(b))
			mu.Unlock()
		}
	}()
	go func() {
		defer wg.Done()
		buf := make([]byte, 64)
		for {
			n, _, err := d.ReadFrom(buf)
			if err != nil {
				return
			}
			mu.Lock()
			got = append(got, "dgram "+string(buf[:n]))
			mu.Unlock()
		}
	}()
	closed := false
	heard = func() []string {
		if !closed {
			closed = true
			// Whatever the agent sent arrived before it exited; give the
			// accepting side a moment to read it, then stop.
			time.Sleep(100 * time.Millisecond)
			l.Close()
			d.Close()
			wg.Wait()
		}
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
	t.Cleanup(func() { heard() })
	return stream, dgram, heard
}
