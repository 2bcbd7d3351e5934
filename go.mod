module github.com/layerseal/layerseal

go 1.26.8

require (
	github.com/go-json-experiment/json v1.27.2
	github.com/moby/sys/capability v0.5.0
	github.com/moby/sys/mountinfo v0.7.3
	github.com/opencontainers/runtime-spec v1.3.0
	github.com/transparency-dev/merkle v0.0.2
	github.com/urfave/cli/v3 v3.14.0
	golang.org/x/sys v0.50.0
)

require (
	github.com/moby/profiles/seccomp v0.3.0
	golang.org/x/net v0.62.0
	gopkg.in/yaml.v3 v3.0.1
)

require github.com/creack/pty v1.1.24
