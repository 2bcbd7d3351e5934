package seccomp

import (
	"runtime"
	"testing"

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
