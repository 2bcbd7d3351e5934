package policy

import (
	"fmt"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"
)

// Views a configuration may name (view:), as nsrun names them.
const (
	ViewMinimal = "minimal"
	ViewHost    = "host"
)

// viewName is ViewMinimal or ViewHost.
type viewName string

func (v *viewName) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && (n.Value == ViewMinimal || n.Value == ViewHost) {
		*v = viewName(n.Value)
		return nil
	}
	return fmt.Errorf("line %d: view %q: want %s or %s", n.Line, n.Value, ViewMinimal, ViewHost)
}

// hostPaths is a YAML sequence of absolute host paths.
type hostPaths []string

func (l *hostPaths) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.SequenceNode {
		return fmt.Errorf("line %d: want a list of absolute paths, such as [/opt/sdk]", n.Line)
	}
	for _, it := range n.Content {
		if it.Kind != yaml.ScalarNode || it.Tag == "!!null" || !filepath.IsAbs(it.Value) || strings.IndexByte(it.Value, 0) >= 0 {
			return fmt.Errorf("line %d: %q: want an absolute path", it.Line, it.Value)
		}
		*l = append(*l, filepath.Clean(it.Value))
	}
	return nil
}
