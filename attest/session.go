package attest

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The files of a session's output directory: its launch record, its final
// statement, and its checkpoints in CheckpointDir, named by CheckpointFile.
const (
	LaunchFile    = "launch.json"
	StatementFile = "statement.json"
	CheckpointDir = "checkpoints"
)

// CheckpointFile is the file name of checkpoint seq: 000001.json,
// 000002.json, …
func CheckpointFile(seq uint64) string { return fmt.Sprintf("%06d.json", seq) }

// LooksLikeCheckpoint reports whether a file name in CheckpointDir names
// a checkpoint (decimal digits, then ".json") rather than something beside
// one, such as its head (HeadFile) or a log receipt
// ("000001.log-receipt.json").
func LooksLikeCheckpoint(name string) bool {
	digits, ok := strings.CutSuffix(name, ".json")
	return ok && digits != "" && strings.Trim(digits, "0123456789") == ""
}

// MaxArtifactSize bounds what ReadArtifact reads of one file: more than
// any statement, checkpoint or launch record a verifier accepts.
const MaxArtifactSize = 512 << 20

// ReadArtifact reads the file at path, refusing one over MaxArtifactSize
// bytes. Its errors name path.
func ReadArtifact(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxArtifactSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %q: %w", path, err)
	}
	if len(b) > MaxArtifactSize {
		return nil, fmt.Errorf("%q is over %d bytes", path, MaxArtifactSize)
	}
	return b, nil
}

// ReadChainDir reads every checkpoint file of dir in order, for
// VerifyChain: the names that look like checkpoints (LooksLikeCheckpoint) must be
// exactly CheckpointFile(1) up to CheckpointFile(n). A gap, a stray name
// or a file that cannot be read is an error wrapping ErrChain. A missing
// dir is an empty chain.
func ReadChainDir(dir string) ([][]byte, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrChain, err)
	}
	var names []string
	for _, e := range ents {
		if LooksLikeCheckpoint(e.Name()) {
			names = append(names, e.Name())
		}
	}
	envs, err := readChainUpTo(dir, uint64(len(names)))
	if err != nil {
		return nil, err
	}
	for i, n := range names { // ReadDir sorts by name
		if n != CheckpointFile(uint64(i+1)) {
			return nil, fmt.Errorf("%w: %s is not checkpoint %d", ErrChain, filepath.Join(dir, n), i+1)
		}
	}
	return envs, nil
}

// readChainUpTo reads checkpoints 1 to n of dir, in order.
func readChainUpTo(dir string, n uint64) ([][]byte, error) {
	var envs [][]byte
	for i := uint64(1); i <= n; i++ {
		b, err := ReadArtifact(filepath.Join(dir, CheckpointFile(i)))
		if err != nil {
			return nil, fmt.Errorf("%w: checkpoint %d: %v", ErrChain, i, err)
		}
		envs = append(envs, b)
	}
	return envs, nil
}
