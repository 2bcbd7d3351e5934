package policy

import (
	"fmt"

	"gopkg.in/yaml.v3"

	"github.com/layerseal/layerseal/egress"
)

// netYAML is the network key of layerseal.yaml:
//
//	network: {allow: [api.example.com, "*.pypi.org", "127.0.0.1:8080"]}
//
// Each allow entry is HOST[:PORT] as run --allow-net takes it
// (egress.ParseAllow); a run with any gets the proxied network.
type netYAML struct {
	Allow []egress.Allow
}

func (w *netYAML) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: network takes a mapping such as {allow: [api.example.com, \"127.0.0.1:8080\"]}", n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Value != "allow" {
			return fmt.Errorf("line %d: unknown key %q in network (its key is allow)", k.Line, k.Value)
		}
		if w.Allow != nil {
			return fmt.Errorf("line %d: network has allow twice", k.Line)
		}
		if v.Kind != yaml.SequenceNode {
			return fmt.Errorf("line %d: network allow takes a list of HOST[:PORT], such as [api.example.com, \"127.0.0.1:8080\"]", v.Line)
		}
		w.Allow = []egress.Allow{}
		for _, it := range v.Content {
			if it.Kind != yaml.ScalarNode || it.Tag == "!!null" {
				return fmt.Errorf("line %d: network allow: want HOST[:PORT] strings", it.Line)
			}
			a, err := egress.ParseAllow(it.Value)
			if err != nil {
				return fmt.Errorf("line %d: network allow: %w", it.Line, err)
			}
			w.Allow = append(w.Allow, a)
		}
	}
	return nil
}
