package attest

import "testing"

// TestCodeBehaviour: what each reason code makes layerseal do, one row per
// code, so that a new code is classified on purpose.
func TestCodeBehaviour(t *testing.T) {
	for _, c := range []struct {
		code                       Code
		unexamined, transient, cut bool
	}{
		{NoMountID, false, false, false},
		{OtherMount, true, false, false},
		{Submount, false, false, false},
		{Unreadable, true, true, false},
		{Vanished, true, true, false},
		{DigestCap, false, false, false},
		{EntryBudget, true, false, true},
		{TimeBudget, true, false, true},
		{DirEntryLimit, true, false, false},
		{RootMissing, true, false, false},
		{LowerChanged, false, false, false},
		{AgentMount, false, false, false},
		{AgentOutlived, false, false, false},
		{CapSysAdmin, false, false, false},
		{UnobservedEnd, false, false, false},
		{Unstable, false, true, false},
		{SandboxWeakened, false, false, false},
		{PathLimit, true, false, true},
		{Conflict, false, false, false},
		{UpperLimit, false, false, false},
	} {
		if c.code.Unexamined() != c.unexamined || c.code.Transient() != c.transient || c.code.Cut() != c.cut {
			t.Errorf("%s: unexamined %v, transient %v, cut %v; want %v, %v, %v", c.code,
				c.code.Unexamined(), c.code.Transient(), c.code.Cut(), c.unexamined, c.transient, c.cut)
		}
	}
}
