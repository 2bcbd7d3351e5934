package layerseal

import (
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// secretWords are what a name that looks like a secret's holds, upper-cased
// (see LooksSecret).
var secretWords = []string{"KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "PWD", "CREDENTIAL", "AUTH", "COOKIE", "PRIVATE"}

// LooksSecret reports whether an environment variable's name looks like that
// of a secret: whether the name, upper-cased (ASCII), holds KEY, TOKEN,
// SECRET, PASSWORD, PASSWD, PASSPHRASE, PWD, CREDENTIAL, AUTH, COOKIE or
// PRIVATE anywhere, inside a word too (ANTHROPIC_API_KEY, GITHUB_TOKEN,
// npm_config__auth, PGPASSWORD, MYSQL_PWD, APIKEY). It errs towards secret:
// GIT_AUTHOR_NAME, KEYTIMEOUT and OLDPWD look like secrets too, and their
// values are left out of the launch record; PATH, HOME and TERM do not.
func LooksSecret(name string) bool {
	up := strings.ToUpper(name)
	return slices.ContainsFunc(secretWords, func(w string) bool { return strings.Contains(up, w) })
}

// recordedEnv returns the agent as its launch record holds it and the names
// of the environment variables whose values it leaves out, sorted and
// unique. A value is recorded only when it was given (as NAME=VALUE, in
// p.Env) and not taken from the caller's environment (inherited names it)
// and its name does not look like a secret (LooksSecret); otherwise the
// entry is left out of the recorded environment and its name is listed.
// An entry without "=" is a name alone, and is treated as one. p is not
// changed: the agent still gets every value.
func recordedEnv(p specs.Process, inherited []string) (specs.Process, []string) {
	if p.Env == nil {
		return p, nil
	}
	var kept, hidden []string
	for _, kv := range p.Env {
		name, _, _ := strings.Cut(kv, "=")
		if LooksSecret(name) || slices.Contains(inherited, name) {
			hidden = append(hidden, name)
			continue
		}
		kept = append(kept, kv)
	}
	if kept == nil {
		kept = []string{}
	}
	p.Env = kept
	slices.Sort(hidden)
	return p, slices.Compact(hidden)
}
