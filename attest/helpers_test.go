package attest

import (
	"crypto"
	"crypto/ed25519"
	"crypto/sha256"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"filippo.io/mldsa"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// testAlg is the algorithm of testSigner's keys. TestMain runs the
// package's tests once under each of Algorithms, so every artifact is
// signed and verified, and every tamper test run, under each.
var testAlg = AlgEd25519

func TestMain(m *testing.M) {
	flag.Parse()
	once := false
	for _, name := range []string{"test.fuzz", "test.bench", "test.list"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" {
			once = true // fuzzing, benchmarks (which name their algorithm) and listing run once
		}
	}
	code := 0
	for _, alg := range Algorithms() {
		testAlg = alg
		if !once {
			fmt.Printf("attest: tests with %s keys\n", alg)
		}
		if c := m.Run(); c != 0 {
			fmt.Printf("attest: FAIL with %s keys\n", alg)
			code = c
		}
		if once {
			break
		}
	}
	os.Exit(code)
}

// testSigner returns a Signer of algorithm testAlg with a fixed key
// derived from seed.
func testSigner(t testing.TB, seed byte) *Signer {
	t.Helper()
	return testSignerOf(t, testAlg, seed)
}

// testSignerOf returns a Signer of algorithm alg with a fixed key derived
// from seed.
func testSignerOf(t testing.TB, alg string, seed byte) *Signer {
	t.Helper()
	var b [32]byte
	for i := range b {
		b[i] = seed + byte(i)
	}
	var keys []crypto.Signer
	if alg == AlgEd25519 || alg == AlgHybrid {
		keys = append(keys, ed25519.NewKeyFromSeed(b[:]))
	}
	if alg == AlgMLDSA65 || alg == AlgHybrid {
		k, err := mldsa.NewPrivateKey(mldsa.MLDSA65(), b[:])
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	s, err := NewSigner(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func digest(s string) []byte {
	sum := sha256.Sum256([]byte(s))
	return sum[:]
}

func sampleLaunch(session string) *LaunchRecord {
	umask := uint32(0o22)
	return &LaunchRecord{
		SessionID: session,
		Workspace: "/home/dev/proj\xff",
		Lower:     LowerIdentity{Dev: 1<<63 + 5, Ino: 1<<53 + 1, MountID: 1<<60 + 7, MountIDKnown: true},
		Overlay: OverlayOptions{
			Options: []string{"rw", "lowerdir=/home/dev/proj\xff", "redirect_dir=nofollow", "metacopy=off"},
			Missing: []string{"uuid=null"},
		},
		Kernel: Kernel{Release: "6.18.0", Features: map[string]bool{"statx_mnt_id": true, "openat2": true, "overlay_escape": false}},
		Agent: specs.Process{
			Args: []string{"agent", "--yes", "a b"},
			Env:  []string{"PATH=/usr/bin", "HOME=/home/agent"},
			Cwd:  "/home/dev/proj",
			User: specs.User{UID: 1000, GID: 1000, Umask: &umask, AdditionalGids: []uint32{27}},
			Capabilities: &specs.LinuxCapabilities{
				Bounding: []string{"CAP_CHOWN"},
			},
			Rlimits:         []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 1<<64 - 1, Soft: 1024}},
			NoNewPrivileges: true,
		},
		Sandbox: Sandbox{
			Terminal: "pty", NewSession: true, Namespaces: []string{"cgroup", "ipc", "mount", "net", "pid", "uts"},
			Network: "none", Cgroup: "/layerseal/0123", CgroupKill: "cgroup.kill", PidsMax: 512, ReadOnlyHost: true,
			Writable: []string{"/home/dev/.cache\xff"}, Seccomp: "default", SeccompSHA256: digest("bpf"),
			Scoped:  []string{"abstract_unix_socket", "signal"},
			Missing: []string{"memory limit: the memory controller is not enabled"},
		},
		Policy: Policy{
			DigestCap: 1 << 30, MaxEntries: 1_000_000, MaxDirEntries: 100_000,
			TimeBudget: 90 * time.Second, Exclude: []Path{"node_modules"}, Protect: []Path{".git/hooks"},
		},
		ToolVersion: "layerseal v0.1.0",
		Started:     time.Date(2025, 11, 30, 10, 0, 0, 123456789, time.UTC),
	}
}

func sampleEntries() []Entry {
	file := func(size uint64, d string) *State {
		return &State{Type: File, Mode: 0o644, UID: 1000, GID: 1000, Size: size, MtimeNS: 1_700_000_000_123_456_789, SHA256: digest(d)}
	}
	return []Entry{
		{Path: Root, Change: Metadata, Old: &State{Type: Dir, Mode: 0o755, MtimeNS: 1}, New: &State{Type: Dir, Mode: 0o755, MtimeNS: 2}},
		{Path: "bin", Change: TypeChange, Old: &State{Type: Symlink, Mode: 0o777, Size: 7, Target: "usr/bin", MtimeNS: -5}, New: &State{Type: Dir, Mode: 0o755}},
		{Path: "dev/null2", Change: Added, New: &State{Type: CharDev, Mode: 0o666, Rdev: 1<<32 + 3}},
		{Path: "new\nline\xff%", Change: Added, New: &State{
			Type: File, Mode: 0o4755, Size: 3, SHA256: digest("abc"),
			Xattrs: []Xattr{{Name: "user.a", Value: []byte{0, 1, 2}}, {Name: "user.empty"}, {Name: "user.z\n", Value: []byte("v")}},
			Link:   "src/main.go",
		}},
		{Path: "old", Change: Deleted, Old: file(10, "old")},
		{Path: "src", Change: Replaced, Old: &State{Type: Dir, Mode: 0o755}, New: &State{Type: Dir, Mode: 0o700}},
		{Path: "src/main.go", Change: Modified, Old: file(1<<40, "a"), New: file(1<<40+1, "b")},
		{Path: "ünïcode/ファイル", Change: Added, New: &State{Type: FIFO, Mode: 0o600}},
	}
}

func sampleStatement(launchEnv []byte, session string) *Statement {
	sum := sha256.Sum256(launchEnv)
	return &Statement{
		SessionID:  session,
		Launch:     sum[:],
		Workspace:  "/home/dev/proj\xff",
		Incomplete: []Reason{{Code: DigestCap, Path: "src/main.go", Detail: "file of 1 TiB over the digest cap of 1 GiB"}, {Code: AgentOutlived, Detail: "2 processes\nkilled"}},
		Entries:    sampleEntries(),
		Exit:       Exit{Code: 137, Signal: "SIGKILL"},
		Ended:      time.Date(2025, 11, 30, 11, 0, 0, 5, time.UTC),
		Stats:      Stats{UpperEntries: 12, LowerEntries: 9, BytesHashed: 1<<64 - 1},
		Logs: []OutputLog{{Name: StderrLog, SHA256: digest("")},
			{Name: StdoutLog, Size: 6, SHA256: digest("hello\n"), Truncated: true}},
	}
}

const (
	session1 = "00112233445566778899aabbccddeeff"
	session2 = "ffeeddccbbaa99887766554433221100"
)

// signedPair returns a signed launch record and statement of session1.
func signedPair(t testing.TB, s *Signer) (launchEnv, stEnv []byte) {
	t.Helper()
	launchEnv, err := SignLaunch(s, sampleLaunch(session1))
	if err != nil {
		t.Fatalf("SignLaunch: %v", err)
	}
	stEnv, err = SignStatement(s, sampleStatement(launchEnv, session1))
	if err != nil {
		t.Fatalf("SignStatement: %v", err)
	}
	return launchEnv, stEnv
}

// headSigOverhead is how much larger than an ed25519 one a bundle of a key
// of alg is: its head's signatures, base64 in the head's envelope and again
// in the bundle (4/3 * 4/3), with their keyids.
func headSigOverhead(alg string) int {
	extra := 0
	if alg != AlgEd25519 {
		extra = sigSize(AlgMLDSA65)*16/9 + 256
	}
	return extra
}

// tamperPositions returns the byte offsets of b that an every-byte tamper
// test flips: all of them for ed25519 keys; for the others (whose
// signatures are 3309 bytes and slower to check) every offset outside a
// base64 run of over 1000 characters (an ML-DSA signature, or an envelope
// inside a bundle), and in such a run its first and last 64 and every
// 29th. The ed25519 pass flips every byte of the same structure.
func tamperPositions(b []byte) []int {
	var out []int
	isB64 := func(c byte) bool {
		return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '='
	}
	for i := 0; i < len(b); {
		j := i
		for j < len(b) && isB64(b[j]) {
			j++
		}
		if j == i {
			out = append(out, i)
			i++
			continue
		}
		for k := i; k < j; k++ {
			if testAlg == AlgEd25519 || j-i <= 1000 || k-i < 64 || j-k <= 64 || (k-i)%29 == 0 {
				out = append(out, k)
			}
		}
		i = j
	}
	return out
}
