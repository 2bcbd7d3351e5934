package main

import (
	"context"
	"os"
	"testing"

	"github.com/layerseal/layerseal/internal/treediff"
	"github.com/layerseal/layerseal/nsrun"
)

// The test binary doubles as the layerseal binary (so the namespace init it
// re-executes is the code under test) and as the agents' manifest tool.
const (
	cliEnv      = "LAYERSEAL_TEST_CLI"      // "1": behave as layerseal
	manifestEnv = "LAYERSEAL_TEST_MANIFEST" // "1": args DIR OUT, write DIR's manifest to OUT
	connectEnv  = "LAYERSEAL_TEST_CONNECT"  // "1": connect to each unix socket named, print "connected PATH" or "refused PATH"
)

func TestMain(m *testing.M) {
	nsrun.Init()
	if os.Getenv(cliEnv) == "1" {
		os.Exit(runCLI(context.Background(), os.Args))
	}
	if os.Getenv(connectEnv) == "1" {
		os.Exit(connectEach(os.Args[1:]))
	}
	if os.Getenv(manifestEnv) == "1" && len(os.Args) == 3 {
		os.Exit(writeManifest(os.Args[1], os.Args[2]))
	}
	os.Exit(m.Run())
}

func writeManifest(dir, out string) int {
	m, err := treediff.Walk(dir)
	if err == nil {
		err = m.WriteFile(out)
	}
	if err != nil {
		os.Stderr.WriteString("manifest: " + err.Error() + "\n")
		return 1
	}
	return 0
}
