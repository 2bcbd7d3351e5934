package attest

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
)

// sampleEgress is two records in statement order: one allowed, one
// refused, with a host that is not valid UTF-8.
func sampleEgress() []Egress {
	t0 := time.Date(2026, 12, 3, 16, 40, 1, 500_000_000, time.UTC)
	return []Egress{
		{Host: "example.com", Port: 443, Protocol: EgressConnect, Address: "93.184.215.14:443", Allowed: true,
			Sent: 517, Received: 5120, First: t0, Last: t0.Add(750 * time.Millisecond), Connections: 1},
		{Host: "metadata.internal\xff", Port: 80, Protocol: EgressHTTP, Address: "169.254.169.254:80",
			Reason: "address in a link-local range", First: t0.Add(2 * time.Second), Last: t0.Add(2 * time.Second), Connections: 1},
	}
}

const sampleEgressJSON = `"egress":[{"host":"example.com","port":"443","protocol":"connect","address":"93.184.215.14:443",` +
	`"allowed":true,"reason":"","sent":"517","received":"5120","first":"2026-12-03T16:40:01.5Z","last":"2026-12-03T16:40:02.25Z","connections":"1"},` +
	`{"host":"metadata.internal%FF","port":"80","protocol":"http","address":"169.254.169.254:80","allowed":false,` +
	`"reason":"address in a link-local range","sent":"0","received":"0","first":"2026-12-03T16:40:03.5Z","last":"2026-12-03T16:40:03.5Z","connections":"1"}]`

func egressPair(t *testing.T, s *Signer) (launchEnv, stEnv []byte) {
	t.Helper()
	launchEnv, err := SignLaunch(s, sampleLaunch(session1))
	if err != nil {
		t.Fatal(err)
	}
	st := sampleStatement(launchEnv, session1)
	st.Egress = sampleEgress()
	stEnv, err = SignStatement(s, st)
	if err != nil {
		t.Fatal(err)
	}
	return launchEnv, stEnv
}

// TestEgressRoundTrip: the records survive signing and verification, the
// payload holds them in the documented form and place, and a statement
// without records has no member (so statements made before verify as
// they were).
func TestEgressRoundTrip(t *testing.T) {
	s := testSigner(t, 1)
	launchEnv, stEnv := egressPair(t, s)
	st, err := VerifyStatement(stEnv, s.Public(), launchEnv)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(st.Egress, sampleEgress()) {
		t.Fatalf("egress %+v, want %+v", st.Egress, sampleEgress())
	}
	if p := payloadOf(t, stEnv); !bytes.HasSuffix(p, []byte(`"truncated":true}],`+sampleEgressJSON+"}}")) {
		t.Fatalf("payload does not end with logs then the egress member as documented:\n%s", p)
	}

	_, plain := signedPair(t, s)
	if bytes.Contains(payloadOf(t, plain), []byte(`"egress"`)) {
		t.Fatal("a statement without egress has an egress member")
	}
	if got, err := VerifyStatement(plain, s.Public(), launchEnv); err != nil || got.Egress != nil {
		t.Fatalf("no egress: got %v, %v", got.Egress, err)
	}
	// The same statement with its egress member removed by hand is the
	// statement signed without records, byte for byte.
	without := bytes.Replace(payloadOf(t, stEnv), []byte(","+sampleEgressJSON), nil, 1)
	if !bytes.Equal(without, payloadOf(t, plain)) {
		t.Fatalf("removing the egress member does not give the statement without it:\n%s\n%s", without, payloadOf(t, plain))
	}
}

// TestEgressStrict: a re-signed statement whose egress member is not in
// its one valid form, or holds values no proxy records, is malformed.
func TestEgressStrict(t *testing.T) {
	s := testSigner(t, 1)
	launchEnv, stEnv := egressPair(t, s)
	payload := string(payloadOf(t, stEnv))
	first := sampleEgressJSON[len(`"egress":[`) : strings.Index(sampleEgressJSON, `},{`)+1]
	for name, edit := range map[string][2]string{
		"unknown member":       {`"connections":"1"}]`, `"connections":"1","pid":"1"}]`},
		"duplicate member":     {`"port":"443",`, `"port":"443","port":"443",`},
		"case variant":         {`"host":"example.com"`, `"Host":"example.com"`},
		"case variant egress":  {`"egress":`, `"Egress":`},
		"missing member":       {`"reason":"","sent"`, `"sent"`},
		"port out of range":    {`"port":"443"`, `"port":"65536"`},
		"numeric port":         {`"port":"443"`, `"port":443`},
		"port with zero":       {`"port":"443"`, `"port":"0443"`},
		"allowed port 0":       {`"port":"443"`, `"port":"0"`},
		"unknown protocol":     {`"protocol":"connect"`, `"protocol":"ftp"`},
		"allowed with reason":  {`"allowed":true,"reason":""`, `"allowed":true,"reason":"x"`},
		"refused no reason":    {`"reason":"address in a link-local range"`, `"reason":""`},
		"allowed no address":   {`"address":"93.184.215.14:443"`, `"address":""`},
		"address no port":      {`"address":"93.184.215.14:443"`, `"address":"93.184.215.14"`},
		"address two spelling": {`"address":"93.184.215.14:443"`, `"address":"093.184.215.14:443"`},
		"last before first":    {`"last":"2026-12-03T16:40:02.25Z"`, `"last":"2026-12-03T16:40:01Z"`},
		"time not UTC":         {`"first":"2026-12-03T16:40:01.5Z"`, `"first":"2026-12-03T17:40:01.5+01:00"`},
		"no connections":       {`"received":"5120","first"`, `"received":"5120","connections":"0","first"`},
		"negative bytes":       {`"sent":"517"`, `"sent":"-1"`},
		"host with NUL":        {`"host":"example.com"`, `"host":"example\u0000.com"`},
		"duplicate record":     {first, first + "," + first},
		"unsorted":             {`"egress":[` + first + ",", `"egress":[`},
		"empty egress":         {sampleEgressJSON, `"egress":[]`},
		"null egress":          {sampleEgressJSON, `"egress":null`},
	} {
		if !strings.Contains(payload, edit[0]) {
			t.Fatalf("%s: %q not in the payload", name, edit[0])
		}
		p := strings.Replace(payload, edit[0], edit[1], 1)
		switch name {
		case "unsorted":
			p = strings.Replace(p, `"connections":"1"}]`, `"connections":"1"},`+first+`]`, 1)
		case "no connections":
			p = strings.Replace(p, `"connections":"1"},{`, `},{`, 1)
		}
		if p == payload {
			t.Fatalf("%s: no change", name)
		}
		if _, err := VerifyStatement(reseal(t, s, []byte(p)), s.Public(), launchEnv); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want ErrMalformed", name, err)
		}
	}

	// Too many records, each valid and in order.
	st := sampleStatement(launchEnv, session1)
	r := sampleEgress()[0]
	for i := range MaxEgressRecords + 1 {
		r.First = r.First.Add(time.Duration(i+1) * time.Nanosecond)
		r.Last = r.First
		st.Egress = append(st.Egress, r)
	}
	if _, err := SignStatement(s, st); err == nil || !strings.Contains(err.Error(), "over the limit") {
		t.Errorf("signed %d egress records: %v", len(st.Egress), err)
	}
	st.Egress = st.Egress[:MaxEgressRecords]
	env, err := SignStatement(s, st)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyStatement(env, s.Public(), launchEnv); err != nil {
		t.Errorf("%d egress records: %v", len(st.Egress), err)
	}
}

// TestTamperEgress changes every value of the egress member: unsigned,
// the signature fails; re-signed with another type, it is malformed;
// re-signed with another value of the same type, it is malformed or the
// verified statement says what the signer changed.
func TestTamperEgress(t *testing.T) {
	s := testSigner(t, 1)
	launchEnv, stEnv := egressPair(t, s)
	changed := tamperStatement(t, s, launchEnv, stEnv, func(ptr string) bool { return strings.HasPrefix(ptr, "/predicate/egress/") },
		func(string) expectation { return acceptOrMalformed })
	if n := len(changed); n != 22 {
		t.Errorf("changed %d egress values, want 22", n)
	}
}

// egressChain signs checkpoints of session1, each with the records given,
// and returns the launch record and the checkpoints' envelope files.
func egressChain(t *testing.T, s *Signer, records ...[]Egress) (launchEnv []byte, envs [][]byte) {
	t.Helper()
	launchEnv, err := SignLaunch(s, sampleLaunch(session1))
	if err != nil {
		t.Fatal(err)
	}
	log := &CheckpointLog{}
	for i, rs := range records {
		c := &Checkpoint{
			SessionID: session1, Launch: sha(launchEnv), Workspace: "/home/dev/proj\xff",
			Taken: time.Date(2026, 12, 3, 16, 40+i, 0, 0, time.UTC), Probe: digest("p"), ProbeEntries: 1,
			Entries: sampleListAt(1), Egress: rs,
		}
		if i > 0 {
			c.Unchanged, c.SameAs, c.Entries = true, 1, nil
		}
		env, err := log.Append(s, c)
		if err != nil {
			t.Fatalf("checkpoint %d: %v", i+1, err)
		}
		envs = append(envs, env)
	}
	return launchEnv, envs
}

// TestEgressChain: checkpoints carry the records so far (even an
// unchanged one), covered by their log leaves; a later checkpoint or the
// final statement that drops a record, or holds fewer bytes or
// connections of one, breaks the chain.
func TestEgressChain(t *testing.T) {
	s := testSigner(t, 1)
	early := sampleEgress()[:1]
	early[0].Sent, early[0].Received, early[0].Last = 100, 200, early[0].First
	grown := sampleEgress()
	launchEnv, envs := egressChain(t, s, nil, early, grown)
	cps, _, err := VerifyChain(envs, s.Public(), launchEnv)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cps[1].Egress, early) || !reflect.DeepEqual(cps[2].Egress, grown) {
		t.Fatalf("checkpoint egress %+v, %+v", cps[1].Egress, cps[2].Egress)
	}
	st := sampleStatement(launchEnv, session1)
	st.CheckpointHead = sha(envs[2])
	st.Egress = grown
	if err := CheckStatementHead(st, envs[2], cps[2]); err != nil {
		t.Fatalf("statement extending the chain: %v", err)
	}

	shrunk := sampleEgress()
	shrunk[0].Received = 199
	fewer := sampleEgress()
	fewer[0].Connections, fewer[0].Sent = 1, 99
	for name, later := range map[string][]Egress{
		"record dropped": grown[1:],
		"bytes shrank":   shrunk,
		"sent shrank":    fewer,
		"none":           nil,
	} {
		_, bad := egressChain(t, s, early, later)
		if _, _, err := VerifyChain(bad, s.Public(), launchEnv); !errors.Is(err, ErrChain) {
			t.Errorf("checkpoint 2 with %s: got %v, want ErrChain", name, err)
		}
		st.Egress = later
		if err := CheckStatementHead(st, envs[2], cps[2]); !errors.Is(err, ErrChain) {
			t.Errorf("statement with %s after a checkpoint with all records: got %v, want ErrChain", name, err)
		}
	}

	// A checkpoint's records re-signed with another value no longer match
	// its log leaf.
	forged := resealEdited(t, s, envs[2], func(it *intoto[checkpointJSON]) { it.Predicate.Egress[0].Received++ })
	if _, err := VerifyCheckpoint(forged, s.Public()); err != ErrNotVerified {
		t.Errorf("checkpoint with re-signed egress: got %v, want ErrNotVerified", err)
	}
	// Nor can they be dropped from it.
	forged = resealEdited(t, s, envs[2], func(it *intoto[checkpointJSON]) { it.Predicate.Egress = nil })
	if _, err := VerifyCheckpoint(forged, s.Public()); err != ErrNotVerified {
		t.Errorf("checkpoint with its egress dropped: got %v, want ErrNotVerified", err)
	}
}

// TestSandboxAllowNet: a launch record of network "proxy" keeps its allow
// list; one of another network, or unsorted, is malformed; a record
// without the member has none.
func TestSandboxAllowNet(t *testing.T) {
	s := testSigner(t, 1)
	l := sampleLaunch(session1)
	l.Sandbox.Network, l.Sandbox.AllowNet = "proxy", []string{"*.example.com", "127.0.0.1:8080", "example.org:443"}
	env, err := SignLaunch(s, l)
	if err != nil {
		t.Fatal(err)
	}
	got, err := VerifyLaunch(env, s.Public())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Sandbox.AllowNet, l.Sandbox.AllowNet) || got.Sandbox.Network != "proxy" {
		t.Fatalf("sandbox %+v", got.Sandbox)
	}
	if p := payloadOf(t, env); !bytes.Contains(p, []byte(`"allow_net":["*.example.com","127.0.0.1:8080","example.org:443"]}`)) {
		t.Fatalf("payload lacks allow_net at the end of the sandbox:\n%s", p)
	}
	plain, err := SignLaunch(s, sampleLaunch(session1))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(payloadOf(t, plain), []byte("allow_net")) {
		t.Fatal("a launch record without an allow list has allow_net")
	}
	for name, edit := range map[string]func(*Sandbox){
		"host network": func(sb *Sandbox) { sb.Network = "host" },
		"unsorted":     func(sb *Sandbox) { sb.AllowNet[0], sb.AllowNet[1] = sb.AllowNet[1], sb.AllowNet[0] },
		"repeated":     func(sb *Sandbox) { sb.AllowNet[1] = sb.AllowNet[0] },
		"space":        func(sb *Sandbox) { sb.AllowNet[0] = "a b" },
		"unknown net":  func(sb *Sandbox) { sb.Network = "bridge" },
	} {
		var it intoto[launchJSON]
		if err := json.Unmarshal(payloadOf(t, env), &it); err != nil {
			t.Fatal(err)
		}
		sb, err := it.Predicate.Sandbox.fromJSON()
		if err != nil {
			t.Fatal(err)
		}
		edit(&sb)
		it.Predicate.Sandbox = sb.toJSON()
		p, err := canonicalJSON(&it)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := VerifyLaunch(reseal(t, s, fixLaunchSubject(p)), s.Public()); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want ErrMalformed", name, err)
		}
	}
}

// TestEgressExtendsFolding: what a key loses may move to the folded
// record of its protocol, outcome and reason, and nowhere else.
func TestEgressExtendsFolding(t *testing.T) {
	open := sampleEgress()[0] // still open at the checkpoint
	open.Sent, open.Received = 100, 10
	kept := sampleEgress()[1]
	folded := Egress{Protocol: EgressConnect, Allowed: true, Sent: 150, Received: 20, Connections: 2, First: open.First, Last: open.Last}
	earlier := SortEgress([]Egress{open, kept})
	if err := EgressExtends(earlier, SortEgress([]Egress{kept, folded})); err != nil {
		t.Errorf("open record folded: %v", err)
	}
	short := folded
	short.Received = 9
	if err := EgressExtends(earlier, SortEgress([]Egress{kept, short})); err == nil {
		t.Error("folded record that did not gain what the key lost accepted")
	}
	other := folded
	other.Protocol = EgressSOCKS5
	if err := EgressExtends(earlier, SortEgress([]Egress{kept, other})); err == nil {
		t.Error("record folded into another protocol's record accepted")
	}
	before := SortEgress([]Egress{kept, folded})
	lessFolded := folded
	lessFolded.Connections = 1
	if err := EgressExtends(before, SortEgress([]Egress{kept, lessFolded})); err == nil {
		t.Error("folded record that lost a connection accepted")
	}
	// Merged duplicates keep every count.
	if got := SortEgress([]Egress{kept, kept}); len(got) != 1 || got[0].Connections != 2 {
		t.Errorf("SortEgress of a repeated record: %+v", got)
	}
}
