module github.com/layerseal/layerseal

go 1.26.8

require (
	github.com/go-json-experiment/json v1.27.2 // indirect
	github.com/moby/sys/capability v0.5.0 // indirect
	github.com/moby/sys/mountinfo v0.7.3 // indirect
	github.com/opencontainers/runtime-spec v1.3.0 // indirect
	github.com/transparency-dev/merkle v0.0.2 // indirect
	github.com/urfave/cli/v3 v3.14.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
