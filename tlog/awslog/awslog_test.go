package awslog

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/go-logr/logr"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"k8s.io/klog/v2"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/tlog"
)

// Env opts in to this test, which starts a MariaDB server (Debian's
// mariadb-server) of its own and an in-process S3 server; once opted in,
// a server that cannot start fails the test.
const Env = "LAYERSEAL_AWS_TEST"

func init() { klog.SetLogger(logr.Discard()) }

// startMariaDB starts mariadbd on a socket in a fresh data dir and returns
// a DSN of an empty database.
func startMariaDB(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "awslog-db-") // a socket path must be short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	data, sock := filepath.Join(dir, "data"), filepath.Join(dir, "s")
	if out, err := exec.Command("mariadb-install-db", "--no-defaults", "--datadir="+data, "--user=root",
		"--auth-root-authentication-method=normal", "--skip-test-db").CombinedOutput(); err != nil {
		t.Fatalf("mariadb-install-db (apt-get install mariadb-server): %v\n%s", err, out)
	}
	srv := exec.Command("mariadbd", "--no-defaults", "--datadir="+data, "--socket="+sock, "--skip-networking",
		"--user=root", "--pid-file="+filepath.Join(dir, "pid"), "--log-error="+filepath.Join(dir, "err"))
	if err := srv.Start(); err != nil {
		t.Fatalf("mariadbd: %v", err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		if err := exec.Command("mariadb", "--no-defaults", "--socket="+sock, "-uroot", "-e", "CREATE DATABASE IF NOT EXISTS tlog").Run(); err == nil {
			break
		}
		if time.Since(start) > 30*time.Second {
			b, _ := os.ReadFile(filepath.Join(dir, "err"))
			t.Fatalf("mariadbd did not answer within 30 s:\n%s", b)
		}
	}
	return fmt.Sprintf("root@unix(%s)/tlog", sock)
}

// TestFleet: two hosts append to one log on tessera's AWS driver (MariaDB
// and an S3 server); log check over the bucket's URL and receipts proven
// from it verify, every head once.
func TestFleet(t *testing.T) {
	if os.Getenv(Env) != "1" {
		t.Skipf("needs a MariaDB server of its own: set %s=1 (scripts/test does, where mariadb-server is installed)", Env)
	}
	dsn := startMariaDB(t)
	backend := s3mem.New()
	if err := backend.CreateBucket("log"); err != nil {
		t.Fatal(err)
	}
	s3srv := httptest.NewServer(gofakes3.New(backend).Server())
	defer s3srv.Close()

	dir := t.TempDir()
	if _, err := tlog.GenerateKey(filepath.Join(dir, "log.key"), "test.example/fleet"); err != nil {
		t.Fatal(err)
	}
	signer, err := tlog.LoadSigner(filepath.Join(dir, "log.key"))
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := tlog.ParseVerifier(filepath.Join(dir, "log.key.pub"))
	if err != nil {
		t.Fatal(err)
	}
	sealKey := filepath.Join(dir, "seal.key")
	attest.GenerateKey(attest.AlgEd25519, sealKey, sealKey+".pub")
	seal, err := attest.LoadPrivateKey(sealKey)
	if err != nil {
		t.Fatal(err)
	}
	sdk := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("k", "s", "")}
	cfg := Config{DSN: dsn, Bucket: "log", S3Endpoint: s3srv.URL, SDK: &sdk, PublicURL: s3srv.URL + "/log/",
		Signer: signer, Verifier: verifier}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	const hosts, each = 2, 20
	var wg sync.WaitGroup
	entries := map[uint64][]byte{}
	var mu sync.Mutex
	for h := range hosts {
		l, err := Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close(ctx)
		for i := range each {
			wg.Go(func() {
				e := head(t, seal, h*each+i)
				idx, err := l.Append(ctx, e)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if _, dup := entries[idx]; dup {
					t.Errorf("index %d given twice", idx)
				}
				entries[idx] = e
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	r, err := tlog.OpenReader(cfg.PublicURL, verifier)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := tlog.Check(ctx, r, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Checkpoint.Size != hosts*each || rep.Heads[seal.KeyID()] != hosts*each {
		t.Fatalf("log of %d entries, %v heads; %d appended", rep.Checkpoint.Size, rep.Heads, hosts*each)
	}
	for idx, e := range entries {
		p, err := r.Inclusion(ctx, idx, rep.Checkpoint.Size)
		if err != nil {
			t.Fatal(err)
		}
		rc := &tlog.Receipt{Origin: r.Origin(), Index: idx, Entry: sha(e), Proof: p, Checkpoint: rep.Checkpoint.Note}
		if _, err := tlog.VerifyReceipt(rc, e, verifier, nil, 0); err != nil {
			t.Fatalf("entry %d: %v", idx, err)
		}
		rc.Index ^= 1
		if _, err := tlog.VerifyReceipt(rc, e, verifier, nil, 0); !errors.Is(err, tlog.ErrNotVerified) {
			t.Fatalf("entry %d at index %d: %v", idx, rc.Index, err)
		}
	}

}

func head(t *testing.T, s *attest.Signer, i int) []byte {
	h := &attest.Head{Kind: attest.HeadKindStatement, SessionID: fmt.Sprintf("%032x", i), Launch: bytes.Repeat([]byte{1}, 32),
		Alg: attest.AlgEd25519, Root: bytes.Repeat([]byte{2}, 32), AppliedRoot: bytes.Repeat([]byte{2}, 32), Complete: true}
	b, err := attest.SignHead(s, h)
	if err != nil {
		t.Error(err)
	}
	return b
}

func sha(b []byte) []byte {
	s := sha256.Sum256(b)
	return s[:]
}
