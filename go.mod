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

require (
	github.com/BurntSushi/toml v1.4.1-0.20240526193622-a339e1f7089c // indirect
	github.com/aymanbagabas/go-udiff v0.4.2 // indirect
	golang.org/x/exp/typeparams v0.0.0-20231108232855-2478ac86f678 // indirect
	golang.org/x/mod v0.41.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/tools v0.51.0 // indirect
	honnef.co/go/tools v0.8.2 // indirect
)

tool honnef.co/go/tools/cmd/staticcheck
