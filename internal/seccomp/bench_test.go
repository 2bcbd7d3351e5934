package seccomp

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/internal/linux"
)

// BenchmarkProfile resolves Docker's default profile for the default
// capabilities.
func BenchmarkProfile(b *testing.B) {
	for b.Loop() {
		if _, err := Profile(defaultCaps); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCompile compiles the resolved profile.
func BenchmarkCompile(b *testing.B) {
	p, err := Profile(defaultCaps)
	if err != nil {
		b.Fatal(err)
	}
	a, err := Native()
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Compile(p, a); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDefault is what init does per run: resolve, compile, digest.
func BenchmarkDefault(b *testing.B) {
	for b.Loop() {
		p, err := Default(defaultCaps)
		if err != nil {
			b.Fatal(err)
		}
		_ = p.SHA256()
	}
}

// BenchmarkLoad loads the program on a fresh thread each time (a thread
// under a filter keeps it, so each is ended after); BenchmarkLoad/thread
// is the same without the load, to subtract.
func BenchmarkLoad(b *testing.B) {
	p, err := Default(defaultCaps)
	if err != nil {
		b.Fatal(err)
	}
	for _, load := range []bool{true, false} {
		name := "load"
		if !load {
			name = "thread"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				done := make(chan error)
				go func() {
					runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
					if !load {
						done <- nil
						return
					}
					if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
						done <- err
						return
					}
					done <- linux.SeccompSetModeFilter(p)
				}()
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCalls makes four system calls per iteration (openat, read,
// close, newfstatat of a small file) on three threads, in interleaved
// rounds: one without a filter, one under the default filter, and one
// under the same filter made uncacheable (a load of an argument put first,
// which changes no answer but stops the kernel's action cache from
// allowing any number without running the program). It reports each
// thread's ns per iteration: what the filter costs the agent's file reads,
// and what the cache saves.
func BenchmarkCalls(b *testing.B) {
	p, err := Default(defaultCaps)
	if err != nil {
		b.Fatal(err)
	}
	uncached := append(Program{{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: offArgs}}, p...)
	path := filepath.Join(b.TempDir(), "f")
	if err := os.WriteFile(path, make([]byte, 4096), 0o600); err != nil {
		b.Fatal(err)
	}
	names := []string{"none", "filter", "uncached"}
	work := make([]chan int, len(names))
	done := make(chan error)
	for i := range work {
		work[i] = make(chan int)
	}
	defer func() {
		for _, w := range work {
			close(w) // ends each worker and its thread
		}
	}()
	for i, filter := range []Program{nil, p, uncached} {
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			if filter != nil {
				if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
					done <- err
					return
				}
				if err := linux.SeccompSetModeFilter(filter); err != nil {
					done <- err
					return
				}
			}
			done <- nil
			buf := make([]byte, 4096)
			var st unix.Stat_t
			for n := range work[i] {
				var err error
				for range n {
					var fd int
					if fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
						break
					}
					_, err = unix.Read(fd, buf)
					unix.Close(fd)
					if err == nil {
						err = unix.Fstatat(unix.AT_FDCWD, path, &st, unix.AT_SYMLINK_NOFOLLOW)
					}
					if err != nil {
						break
					}
				}
				done <- err
			}
		}()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	spent := make([]time.Duration, len(names))
	const round = 2000
	b.ResetTimer()
	for left := b.N; left > 0; left -= round {
		n := min(left, round)
		for i, w := range work {
			start := time.Now()
			w <- n
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			spent[i] += time.Since(start)
		}
	}
	for i, name := range names {
		b.ReportMetric(float64(spent[i].Nanoseconds())/float64(b.N), name+"-ns/op")
	}
	b.ReportMetric(float64(spent[1])/float64(spent[0]), "filter/none")
	b.ReportMetric(float64(spent[2])/float64(spent[0]), "uncached/none")
}
