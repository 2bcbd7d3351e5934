package probe_test

import (
	"slices"
	"testing"

	"github.com/layerseal/layerseal/overlay"
	"github.com/layerseal/layerseal/probe"
)

// The probe tries the options the overlay is mounted with; the two lists
// live apart only so that neither package imports the other.
func TestPinnedOptionsMatchOverlay(t *testing.T) {
	if !slices.Equal(probe.PinnedOverlayOptions, overlay.Pinned) {
		t.Fatalf("probe tries %q, overlay mounts %q", probe.PinnedOverlayOptions, overlay.Pinned)
	}
}
