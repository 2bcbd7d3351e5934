package layerseal

import (
	"fmt"

	"github.com/layerseal/layerseal/policy"
)

// WorkspaceRules returns what a session over the workspace ws would
// protect beside policy.Builtin, as rows of the same kind: the protected
// globs of its configuration (the file named, or ws's layerseal.yaml when
// file is ""), then the hooks directories and config files FindGitHooks
// finds with this process's environment, as a launch would.
func WorkspaceRules(ws, file string) ([]policy.RuleRow, error) {
	var rows []policy.RuleRow
	if _, err := resolveDir("workspace", ws); err != nil {
		return nil, err
	}
	c, err := LoadConfig(ws, file)
	if err != nil {
		return nil, err
	}
	if c != nil {
		for _, g := range c.Protected {
			rows = append(rows, policy.RuleRow{Rule: g.String(), Tool: "layerseal", Reason: "protected by the workspace's configuration"})
		}
	}
	g, err := FindGitHooks(ws)
	if err != nil {
		return nil, err
	}
	for _, h := range g.HooksPaths {
		for _, glob := range h.Globs {
			rows = append(rows, policy.RuleRow{Rule: glob, Tool: "git",
				Reason: fmt.Sprintf("hooks git runs: core.hooksPath %q (%s line %d)", h.Value, h.File, h.Line)})
		}
	}
	for _, f := range g.Files {
		rows = append(rows, policy.RuleRow{Rule: f.Glob, Tool: "git", Reason: "a config file git reads (an include)"})
	}
	return rows, nil
}
