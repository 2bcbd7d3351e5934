package layerseal

import (
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestLooksSecret: real names of secrets look like secrets, in any case
// and inside a word; the everyday names an agent is given do not.
func TestLooksSecret(t *testing.T) {
	for _, n := range []string{
		"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GITHUB_TOKEN", "GH_TOKEN", "NPM_TOKEN", "npm_config__auth",
		"npm_config__authToken", "NODE_AUTH_TOKEN", "AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "AWS_SESSION_TOKEN",
		"PGPASSWORD", "MYSQL_PWD", "MYSQL_ROOT_PASSWORD", "DOCKER_AUTH_CONFIG", "GOOGLE_APPLICATION_CREDENTIALS",
		"AZURE_CLIENT_SECRET", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "SSH_AUTH_SOCK", "HTTP_AUTHORIZATION",
		"VAULT_TOKEN", "CARGO_REGISTRY_TOKEN", "TWINE_PASSWORD", "GPG_PASSPHRASE", "SLACK_BOT_TOKEN",
		"STRIPE_SECRET_KEY", "SIGNING_PRIVATE", "apikey", "ApiKey", "SENTRY_AUTH_TOKEN", "CODECOV_TOKEN",
		"DATADOG_API_KEY", "GITLAB_PRIVATE_TOKEN", "REDIS_PASSWD", "SESSION_COOKIE", "CI_JOB_TOKEN",
	} {
		if !LooksSecret(n) {
			t.Errorf("%s does not look like a secret", n)
		}
	}
	for _, n := range []string{
		"PATH", "HOME", "TERM", "LANG", "LC_ALL", "USER", "LOGNAME", "SHELL", "TZ", "EDITOR", "PAGER", "MANPATH",
		"GOPATH", "GOFLAGS", "GOCACHE", "GOMODCACHE", "GOPROXY", "CGO_ENABLED", "NODE_ENV", "NODE_OPTIONS", "CI",
		"PYTHONPATH", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "PKG_CONFIG_PATH", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
		"XDG_CONFIG_HOME", "XDG_RUNTIME_DIR", "CARGO_HOME", "RUSTFLAGS", "RUST_BACKTRACE", "DEBIAN_FRONTEND",
		"TMPDIR", "HOSTNAME", "DISPLAY", "COLUMNS", "LINES", "MAKEFLAGS", "JAVA_HOME", "FOO", "",
	} {
		if LooksSecret(n) {
			t.Errorf("%q looks like a secret", n)
		}
	}
}

// TestRecordedEnv: the recorded agent holds the values given under
// names that do not look like secrets; the others, and those taken from
// the caller's environment, are named once each, sorted; the agent's own
// environment is untouched.
func TestRecordedEnv(t *testing.T) {
	env := []string{"PATH=/usr/bin:/bin", "HOME=/root", "TERM=xterm", "FOO=bar", "GITHUB_TOKEN=s3cr3t",
		"MY_API_KEY=k3y", "CALLERS=v", "github_token=again", "GITHUB_TOKEN=twice", "ALONE"}
	p := specs.Process{Args: []string{"agent"}, Env: slices.Clone(env)}
	got, hidden := recordedEnv(p, []string{"CALLERS"})
	if want := []string{"PATH=/usr/bin:/bin", "HOME=/root", "TERM=xterm", "FOO=bar", "ALONE"}; !slices.Equal(got.Env, want) {
		t.Errorf("recorded env %q, want %q", got.Env, want)
	}
	if want := []string{"CALLERS", "GITHUB_TOKEN", "MY_API_KEY", "github_token"}; !slices.Equal(hidden, want) {
		t.Errorf("not recorded %q, want %q", hidden, want)
	}
	if !slices.Equal(p.Env, env) {
		t.Errorf("the agent's env changed to %q", p.Env)
	}
	if got, hidden := recordedEnv(specs.Process{Args: []string{"agent"}}, []string{"X"}); got.Env != nil || hidden != nil {
		t.Errorf("no env recorded as %q, not recorded %q", got.Env, hidden)
	}
}
