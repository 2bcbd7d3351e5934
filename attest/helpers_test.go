package attest

import (
	"crypto/ed25519"
	"crypto/sha256"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// testSigner returns a Signer with a fixed key derived from seed.
func testSigner(t testing.TB, seed byte) *Signer {
	t.Helper()
	var b [ed25519.SeedSize]byte
	for i := range b {
		b[i] = seed + byte(i)
	}
	s, err := NewSigner(ed25519.NewKeyFromSeed(b[:]))
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
