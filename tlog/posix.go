package tlog

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/transparency-dev/tessera"
	"github.com/transparency-dev/tessera/storage/posix"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/internal/linux"
)

// Options tune the appender. Zero values take the defaults below.
type Options struct {
	// Key is the log's private note key file; empty: the one log init
	// recorded in the log's directory.
	Key string
	// BatchMaxAge is how long an entry waits for others to share its
	// batch (DefaultBatchMaxAge).
	BatchMaxAge time.Duration
	// CheckpointInterval is the least time between two published
	// checkpoints (DefaultCheckpointInterval, tessera's minimum).
	CheckpointInterval time.Duration
	// Poll is how often a waiting Append reads the checkpoint
	// (DefaultPoll).
	Poll time.Duration
}

// The POSIX driver's defaults: low, because a run waits for its receipt.
const (
	DefaultBatchMaxAge        = 5 * time.Millisecond
	DefaultCheckpointInterval = 100 * time.Millisecond
	DefaultPoll               = 10 * time.Millisecond
)

// configFile, in the log's directory, says what log init made: the
// origin, the verifier key and where the private key is. It holds no
// secret; the directory's other files are the log's public tiles.
const configFile = ".state/layerseal.json"

type logConfig struct {
	Format   string `json:"format"`
	Verifier string `json:"verifier"`
	Key      string `json:"key"`
}

const configFormat = "https://layerseal.dev/log-config/v1"

// InitPOSIX makes a log in dir (created if missing, or empty) signed by
// the note key in keyFile: it publishes the empty log's checkpoint and
// records the key's path. It returns the verifier key.
func InitPOSIX(ctx context.Context, dir, keyFile string) (string, error) {
	signer, err := LoadSigner(keyFile)
	if err != nil {
		return "", err
	}
	pub, err := os.ReadFile(keyFile + ".pub")
	if err != nil {
		return "", fmt.Errorf("the verifier key beside %q: %w", keyFile, err)
	}
	vkey := string(trimNL(pub))
	if v, err := note.NewVerifier(vkey); err != nil || v.Name() != signer.Name() || v.KeyHash() != signer.KeyHash() {
		return "", fmt.Errorf("%q does not hold the verifier key of %q", keyFile+".pub", keyFile)
	}
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		if _, err := os.Stat(filepath.Join(dir, configFile)); err == nil {
			return "", fmt.Errorf("%q is already a log (log add appends to it)", dir)
		}
		return "", fmt.Errorf("%q is not empty: a log needs a directory of its own", dir)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	absKey, err := filepath.Abs(keyFile)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Join(dir, ".state"), 0o755); err != nil {
		return "", err
	}
	b, _ := json.Marshal(logConfig{Format: configFormat, Verifier: vkey, Key: absKey}, json.Deterministic(true))
	if err := os.WriteFile(filepath.Join(dir, configFile), append(b, '\n'), 0o644); err != nil {
		return "", err
	}
	l, err := OpenPOSIX(ctx, dir, Options{})
	if err != nil {
		return "", err
	}
	return vkey, l.Close(ctx)
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// posixLog is the POSIX driver: a tessera log in a local directory,
// shared by processes through tessera's file locks.
type posixLog struct {
	*Reader
	dir      string
	add      tessera.AddFn
	awaiter  *tessera.PublicationAwaiter
	shutdown func(context.Context) error
	cancel   context.CancelFunc
	once     sync.Once

	lockMu sync.Mutex
	lockN  int
	lock   *os.File
}

// sequenceLock, in the log's directory, is held (flock) by a process
// while it opens the log or has an entry being sequenced. tessera's own
// locks are fcntl locks, which the kernel owns per process: two processes
// that each have one goroutine holding one lock and another waiting for
// the other's get EDEADLK (a false deadlock), on which tessera panics.
// With sequencing one process at a time, only publishing overlaps, and
// that takes one lock.
const sequenceLock = ".state/layerseal.lock"

// enter takes the sequencing lock for this process (shared by its
// goroutines); exit releases it when the last one leaves.
func (l *posixLog) enter() error {
	l.lockMu.Lock()
	defer l.lockMu.Unlock()
	if l.lockN == 0 {
		if err := linux.Flock(int(l.lock.Fd()), unix.LOCK_EX); err != nil {
			return fmt.Errorf("log %q: lock: %w", l.dir, err)
		}
	}
	l.lockN++
	return nil
}

func (l *posixLog) exit() {
	l.lockMu.Lock()
	defer l.lockMu.Unlock()
	if l.lockN--; l.lockN == 0 {
		linux.Flock(int(l.lock.Fd()), unix.LOCK_UN)
	}
}

// OpenPOSIX opens the log in dir, which InitPOSIX made, for appending.
func OpenPOSIX(ctx context.Context, dir string, opts Options) (Log, error) {
	c, err := readConfig(dir)
	if err != nil {
		return nil, err
	}
	keyFile := c.Key
	if opts.Key != "" {
		keyFile = opts.Key
	}
	signer, err := LoadSigner(keyFile)
	if err != nil {
		return nil, fmt.Errorf("log %q: its key: %w", dir, err)
	}
	verifier, err := note.NewVerifier(c.Verifier)
	if err != nil || verifier.KeyHash() != signer.KeyHash() || verifier.Name() != signer.Name() {
		return nil, fmt.Errorf("log %q: key %q is not the log's key %q", dir, keyFile, c.Verifier)
	}
	r, err := OpenReader(dir, verifier)
	if err != nil {
		return nil, err
	}
	if opts.BatchMaxAge == 0 {
		opts.BatchMaxAge = DefaultBatchMaxAge
	}
	if opts.CheckpointInterval == 0 {
		opts.CheckpointInterval = DefaultCheckpointInterval
	}
	if opts.Poll == 0 {
		opts.Poll = DefaultPoll
	}
	lf, err := os.OpenFile(filepath.Join(dir, sequenceLock), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("log %q: %w", dir, err)
	}
	pl := &posixLog{Reader: r, dir: dir, lock: lf}
	if err := pl.enter(); err != nil {
		lf.Close()
		return nil, err
	}
	defer pl.exit()
	driver, err := posix.New(ctx, posix.Config{Path: dir})
	if err != nil {
		return nil, fmt.Errorf("log %q: %w", dir, err)
	}
	bctx, cancel := context.WithCancel(context.Background())
	ao := tessera.NewAppendOptions().
		WithCheckpointSigner(signer).
		WithBatching(tessera.DefaultBatchMaxSize, opts.BatchMaxAge).
		WithCheckpointInterval(opts.CheckpointInterval).
		// Partial tiles stay: a receipt may be proven against an older,
		// cosigned checkpoint.
		WithGarbageCollectionInterval(0).
		// In one process an entry added twice gets its first index.
		WithAntispam(tessera.DefaultAntispamInMemorySize, nil)
	app, shutdown, lr, err := tessera.NewAppender(bctx, driver, ao)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("log %q: %w", dir, err)
	}
	pl.add, pl.shutdown, pl.cancel = app.Add, shutdown, cancel
	pl.awaiter = tessera.NewPublicationAwaiter(bctx, lr.ReadCheckpoint, opts.Poll)
	return pl, nil
}

func (l *posixLog) Append(ctx context.Context, entry []byte) (uint64, error) {
	if err := l.enter(); err != nil {
		return 0, err
	}
	f := l.add(ctx, tessera.NewEntry(entry))
	_, err := f() // sequenced: durable, with its index
	l.exit()
	if err != nil {
		return 0, fmt.Errorf("log %q: append: %w", l.dir, err)
	}
	idx, _, err := l.awaiter.Await(ctx, f)
	if err != nil {
		return 0, fmt.Errorf("log %q: append: %w", l.dir, err)
	}
	return idx.Index, nil
}

func (l *posixLog) Close(ctx context.Context) error {
	var err error
	l.once.Do(func() {
		err = l.shutdown(ctx)
		l.cancel()
		l.lock.Close()
	})
	if err != nil {
		return fmt.Errorf("log %q: close: %w", l.dir, err)
	}
	return nil
}

// CheckPOSIX says whether dir is a log that InitPOSIX made, and its key
// loads, without opening it for appending.
func CheckPOSIX(dir, key string) error {
	c, err := readConfig(dir)
	if err != nil {
		return err
	}
	if key == "" {
		key = c.Key
	}
	if _, err := LoadSigner(key); err != nil {
		return fmt.Errorf("log %q: its key: %w", dir, err)
	}
	return nil
}

// readConfig reads what log init recorded in dir.
func readConfig(dir string) (*logConfig, error) {
	b, err := os.ReadFile(filepath.Join(dir, configFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%q is not a log: make one with `layerseal log init %s --key LOGKEY`", dir, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("log %q: %w", dir, err)
	}
	var c logConfig
	if err := json.Unmarshal(b, &c, json.RejectUnknownMembers(true)); err != nil || c.Format != configFormat {
		return nil, fmt.Errorf("log %q: its %s is not one log init wrote", dir, configFile)
	}
	return &c, nil
}
