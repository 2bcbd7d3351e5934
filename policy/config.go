package policy

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/egress"
)

// FileName is the configuration file layerseal looks for in the workspace
// root.
const FileName = "layerseal.yaml"

// MaxConfigSize bounds a configuration file.
const MaxConfigSize = 1 << 20

// Apply modes.
const (
	// ApplyAuto applies the swept change set when the agent is done, but
	// stages it when the run had violations, the agent exited non-zero or
	// a signal ended it.
	ApplyAuto   = "auto"
	ApplyStage  = "stage"  // keep it staged for review
	ApplyAlways = "always" // apply it whatever the run's outcome
)

// Config is a parsed layerseal.yaml:
//
//	exclude: [.git/objects, node_modules, target]   # summarized, not itemized
//	protected: [.env, ".env.*", .github/workflows/**]
//	digest_cap: 256MiB          # bytes, or with a KiB/MiB/GiB/TiB suffix
//	max_entries_per_dir: 10000
//	budget: {entries: 1000000, time: 10m}
//	checkpoint_every: 0s        # Go duration; 0 disables interval checkpoints
//	apply: auto                 # auto | stage | always
//	log: /var/lib/layerseal/log # anchor each run in this transparency log
//	max_upper: 10GiB            # stop the agent once its upper layer takes this much disk
//	min_free: 20GiB             # stop it once the state dir's filesystem has less free
//	network: {allow: [api.example.com, "127.0.0.1:8080"]} # proxied, to these only
//	view: minimal               # minimal | host: what of the host the agent sees
//	ro: [/opt/sdk]              # host paths the agent may read (absolute)
//
// Every key is optional; zero values mean layerseal's defaults. Unknown or
// repeated keys, values of the wrong kind, negative limits and globs that
// can never match are errors naming the line.
type Config struct {
	Exclude          []*Glob
	Protected        []*Glob
	DigestCap        int64
	MaxEntriesPerDir int64
	Entries          int64         // budget.entries
	Time             time.Duration // budget.time
	CheckpointEvery  time.Duration
	Apply            string // ApplyAuto (also when not given), ApplyStage or ApplyAlways
	// Log is the transparency log directory each run is anchored in
	// (relative to the workspace); "" for none.
	Log      string
	MaxUpper int64 // max_upper; 0 when not given
	MinFree  int64 // min_free; 0 when not given
	// AllowNet are the destinations the agent may reach through the
	// proxy (network: {allow: [...]}); any selects the proxied network.
	AllowNet []egress.Allow
	// View is ViewMinimal, ViewHost, or "" when not given; ReadOnly are
	// host paths the agent may read (ro:).
	View     string
	ReadOnly []string
	// Digest is the SHA-256 of the file's bytes; nil for a config that was
	// not read from a file.
	Digest []byte
}

type fileConfig struct {
	Exclude          globList   `yaml:"exclude"`
	Protected        globList   `yaml:"protected"`
	DigestCap        sizeValue  `yaml:"digest_cap"`
	MaxEntriesPerDir count      `yaml:"max_entries_per_dir"`
	Budget           budgetYAML `yaml:"budget"`
	CheckpointEvery  duration   `yaml:"checkpoint_every"`
	Apply            applyMode  `yaml:"apply"`
	Log              string     `yaml:"log"`
	MaxUpper         sizeValue  `yaml:"max_upper"`
	MinFree          sizeValue  `yaml:"min_free"`
	Network          netYAML    `yaml:"network"`
	View             viewName   `yaml:"view"`
	ReadOnly         hostPaths  `yaml:"ro"`
}

type budgetYAML struct {
	Entries count    `yaml:"entries"`
	Time    duration `yaml:"time"`
}

func (b *budgetYAML) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: budget takes a mapping such as {entries: 1000000, time: 10m}", n.Line)
	}
	// Node.Decode does not refuse unknown keys: check them here.
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; k.Value != "entries" && k.Value != "time" {
			return fmt.Errorf("line %d: unknown key %q in budget (its keys are entries and time)", k.Line, k.Value)
		}
	}
	type plain budgetYAML
	return n.Decode((*plain)(b))
}

// count is a positive whole number, refused with its line otherwise.
type count struct {
	n   int64
	set bool
}

func (c *count) UnmarshalYAML(n *yaml.Node) error {
	v, err := strconv.ParseInt(n.Value, 10, 64)
	if n.Kind != yaml.ScalarNode || err != nil || v <= 0 {
		return fmt.Errorf("line %d: %q: want a positive whole number such as 10000", n.Line, n.Value)
	}
	*c = count{v, true}
	return nil
}

// applyMode is ApplyAuto, ApplyStage or ApplyAlways.
type applyMode string

func (a *applyMode) UnmarshalYAML(n *yaml.Node) error {
	switch v := n.Value; {
	case n.Kind == yaml.ScalarNode && (v == ApplyAuto || v == ApplyStage || v == ApplyAlways):
		*a = applyMode(v)
		return nil
	}
	return fmt.Errorf("line %d: apply %q: want %s, %s or %s", n.Line, n.Value, ApplyAuto, ApplyStage, ApplyAlways)
}

// globList is a YAML sequence of globs, compiled with line numbers in
// errors.
type globList []*Glob

func (l *globList) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.SequenceNode {
		return fmt.Errorf("line %d: want a list of globs, such as [%s]", n.Line, n.Value)
	}
	for _, it := range n.Content {
		if it.Kind != yaml.ScalarNode || it.Tag == "!!null" {
			return fmt.Errorf("line %d: want a glob string", it.Line)
		}
		g, err := Compile(it.Value)
		if err != nil {
			return fmt.Errorf("line %d: %w", it.Line, err)
		}
		*l = append(*l, g)
	}
	return nil
}

type sizeValue struct {
	n   int64
	set bool
}

func (s *sizeValue) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a byte count such as 256MiB or 1GB", n.Line)
	}
	v, err := ParseSize(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*s = sizeValue{v, true}
	return nil
}

type duration struct {
	d   time.Duration
	set bool
}

func (d *duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil || v < 0 {
		return fmt.Errorf("line %d: %q is not a duration such as 10m or 30s", n.Line, n.Value)
	}
	*d = duration{v, true}
	return nil
}

// ParseSize reads a positive byte count: a whole number with an optional
// unit, KiB, MiB, GiB, TiB (powers of 1024), KB, MB, GB, TB (powers of
// 1000) or B, such as 1048576, 512KiB, 256MiB or 1GB.
func ParseSize(s string) (int64, error) {
	mult := int64(1)
	num := strings.TrimSpace(s)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}} {
		if strings.HasSuffix(num, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.m
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a positive byte count such as 256MiB or 1GB", s)
	}
	return n * mult, nil
}

// Parse reads a configuration strictly. name is used in errors.
func Parse(name string, data []byte) (*Config, error) {
	if len(data) > MaxConfigSize {
		return nil, fmt.Errorf("config %q: over %d bytes", name, MaxConfigSize)
	}
	sum := sha256.Sum256(data)
	c := &Config{Apply: ApplyAuto, Digest: sum[:]}
	var f fileConfig
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(&f)
	if errors.Is(err, io.EOF) {
		return c, nil // empty file
	}
	if err != nil {
		return nil, fmt.Errorf("config %q: %w", name, cleanYAMLError(err))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("config %q: more than one YAML document", name)
	}
	c.Exclude, c.Protected = f.Exclude, f.Protected
	c.DigestCap = f.DigestCap.n
	c.MaxEntriesPerDir, c.Entries = f.MaxEntriesPerDir.n, f.Budget.Entries.n
	c.Time = f.Budget.Time.d
	c.CheckpointEvery = f.CheckpointEvery.d
	if f.Apply != "" {
		c.Apply = string(f.Apply)
	}
	c.Log = f.Log
	c.MaxUpper, c.MinFree = f.MaxUpper.n, f.MinFree.n
	c.AllowNet = f.Network.Allow
	c.View, c.ReadOnly = string(f.View), f.ReadOnly
	return c, nil
}

// unknownField is how the decoder reports a key the file may not have.
var unknownField = regexp.MustCompile(`field (\S+) not found in type \S+`)

// wrongKind is how the decoder reports a value of the wrong kind.
var wrongKind = regexp.MustCompile(`cannot unmarshal !!(\w+) (.*) into \S+`)

// cleanYAMLError drops the "yaml: " prefixes the decoder adds and says in
// the file's words what its Go-typed messages say.
func cleanYAMLError(err error) error {
	msgs := []string{strings.TrimPrefix(err.Error(), "yaml: ")}
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	for i, m := range msgs {
		m = unknownField.ReplaceAllString(m, "unknown key \"$1\" (the keys are exclude, protected, digest_cap, max_entries_per_dir, budget (entries, time), checkpoint_every, apply, log, max_upper, min_free, network (allow), view, ro)")
		m = wrongKind.ReplaceAllString(m, "$2 is not a value this key takes")
		msgs[i] = m
	}
	return errors.New(strings.Join(msgs, "; "))
}

// Texts returns the globs as written, as paths for the launch record.
func Texts(gs []*Glob) []attest.Path {
	var out []attest.Path
	for _, g := range gs {
		out = append(out, attest.Path(g.text))
	}
	return out
}

// CompileAll compiles globs, naming the first bad one.
func CompileAll(texts []string) ([]*Glob, error) {
	var out []*Glob
	for _, t := range texts {
		g, err := Compile(t)
		if err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, nil
}
