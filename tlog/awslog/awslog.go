// Package awslog is the transparency log on tessera's AWS driver, for a
// fleet of hosts that share one log: sequencing in a MySQL-compatible
// database, tiles and checkpoints in an S3-compatible bucket that readers
// (verifiers, witnesses, log check) read over HTTP(S). Every host opens the
// log with the same note key and appends; see docs/LOG.md.
package awslog

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/transparency-dev/tessera"
	tessaws "github.com/transparency-dev/tessera/storage/aws"
	"golang.org/x/mod/sumdb/note"

	"github.com/layerseal/layerseal/tlog"
)

// Config says where a fleet's log is.
type Config struct {
	// DSN of the MySQL-compatible database that sequences entries, such
	// as "user:pass@tcp(db:3306)/layerseal_log".
	DSN string
	// Bucket and, for a store other than Amazon S3, its endpoint
	// (path-style addressing is then used) and the SDK's configuration
	// (region, credentials); nil SDK: the AWS SDK's default chain.
	Bucket     string
	S3Endpoint string
	SDK        *aws.Config
	// PublicURL is where readers fetch the bucket's files (the log's root).
	PublicURL string
	// Signer signs checkpoints; Verifier is its verifier key.
	Signer   note.Signer
	Verifier note.Verifier
	// BatchMaxAge and CheckpointInterval as in tlog.Options (zero: tlog's
	// defaults; tessera's AWS driver allows a checkpoint a second at most).
	BatchMaxAge, CheckpointInterval time.Duration
}

type awsLog struct {
	*tlog.Reader
	add      tessera.AddFn
	awaiter  *tessera.PublicationAwaiter
	shutdown func(context.Context) error
	cancel   context.CancelFunc
	once     sync.Once
}

// Open opens the fleet's log for appending.
func Open(ctx context.Context, c Config) (tlog.Log, error) {
	r, err := tlog.OpenReader(c.PublicURL, c.Verifier)
	if err != nil {
		return nil, err
	}
	cfg := tessaws.Config{DSN: c.DSN, Bucket: c.Bucket, SDKConfig: c.SDK, MaxOpenConns: 16, MaxIdleConns: 4}
	if c.S3Endpoint != "" {
		cfg.S3Options = func(o *s3.Options) {
			o.BaseEndpoint = aws.String(c.S3Endpoint)
			o.UsePathStyle = true
		}
	}
	driver, err := tessaws.New(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("log on %q: %w", c.Bucket, err)
	}
	if c.BatchMaxAge == 0 {
		c.BatchMaxAge = tlog.DefaultBatchMaxAge
	}
	if c.CheckpointInterval == 0 {
		c.CheckpointInterval = time.Second
	}
	bctx, cancel := context.WithCancel(context.Background())
	ao := tessera.NewAppendOptions().
		WithCheckpointSigner(c.Signer).
		WithBatching(tessera.DefaultBatchMaxSize, c.BatchMaxAge).
		WithCheckpointInterval(c.CheckpointInterval).
		WithGarbageCollectionInterval(0).
		WithAntispam(tessera.DefaultAntispamInMemorySize, nil)
	app, shutdown, lr, err := tessera.NewAppender(bctx, driver, ao)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("log on %q: %w", c.Bucket, err)
	}
	return &awsLog{Reader: r, add: app.Add, shutdown: shutdown, cancel: cancel,
		awaiter: tessera.NewPublicationAwaiter(bctx, lr.ReadCheckpoint, tlog.DefaultPoll)}, nil
}

func (l *awsLog) Append(ctx context.Context, entry []byte) (uint64, error) {
	idx, _, err := l.awaiter.Await(ctx, l.add(ctx, tessera.NewEntry(entry)))
	if err != nil {
		return 0, fmt.Errorf("log %q: append: %w", l.Location(), err)
	}
	return idx.Index, nil
}

func (l *awsLog) Close(ctx context.Context) error {
	var err error
	l.once.Do(func() {
		err = l.shutdown(ctx)
		l.cancel()
	})
	return err
}
