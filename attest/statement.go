package attest

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// StatementSubject is the name of a change statement's first subject,
// whose SHA-256 digest is the Merkle root of its entries.
const StatementSubject = "workspace-changes"

// Statement is the signed record of what changed in a workspace during one
// session. It is signed with SignStatement as an in-toto statement of
// predicate type StatementPredicateType whose first subject is named
// StatementSubject with the Merkle root (see MerkleRoot) as its digest,
// followed by one subject for each file the agent wrote, named by its path
// with the SHA-256 of its content as its digest (StatementSubjects says
// which files), so that Sigstore tooling can check a single file against
// the statement.
//
// The predicate's JSON members, in this order:
//
//	session_id       32 lowercase hex digits
//	launch_sha256    SHA-256 of the launch record's envelope file, lowercase hex
//	key_id           key ID of the signing key, ALG:HEX (see PublicKey)
//	workspace        host path, text form of Bytes
//	root             Merkle root, lowercase hex
//	count            number of entries, decimal string
//	complete         bool, true exactly when incomplete is empty
//	incomplete       array of {"code", "path" (omitted when empty), "detail" (Bytes text)}
//	changes          array of entries, sorted by path bytes, paths unique:
//	                 {"path", "change", "old" (omitted for added), "new" (omitted for deleted)}
//	exit             {"code": number, "signal": string, omitted when empty,
//	                 "unknown": true, only when the status is not known (code 0),
//	                 "interrupt": signal name, omitted when empty}
//	ended            RFC 3339 UTC time with nanoseconds, trailing zeros dropped
//	stats            {"upper_entries","lower_entries","bytes_hashed": decimal strings}
//	checkpoint_head  SHA-256 of the last checkpoint's envelope file, lowercase hex;
//	                 omitted when the session made no checkpoint
//	excluded         array of {"path", "entries", "bytes" (decimal strings)}: the
//	                 subtrees declared out of the itemized scope, sorted by path;
//	                 omitted when empty
//	violations       array of {"path", "rule" (Bytes text), "action": "reverted" or
//	                 "blocked"}, sorted by path; omitted when empty
//	applied_root     Merkle root of the change set left after the sweep, lowercase hex
//	applied_count    number of those entries, decimal string
//	applied          those entries, like changes; present only when violations is
//	                 (otherwise they are the changes and applied_root is root)
//	logs             the agent's output kept by run --log-output (see OutputLog);
//	                 omitted when none was kept
//	egress           the connections the agent made through the proxy of
//	                 run --network proxy (see Egress); omitted when none
//
// A state ("old", "new") has "type", "mode", "uid", "gid" (numbers), "size"
// and "mtime_ns" (decimal strings) always, and "sha256" (lowercase hex),
// "target" (Path text), "rdev" (decimal string), "xattrs" (array of {"name":
// Bytes text, "value": base64}) and "link" (Path text) only when not zero.
type Statement struct {
	SessionID string
	// Launch is the SHA-256 of the launch record's envelope file bytes.
	Launch    []byte
	KeyID     string // set by SignStatement
	Workspace Bytes  // the workspace's host path
	// Root is the Merkle root of Entries and Count their number; Complete is
	// true exactly when Incomplete is empty. SignStatement sets all three.
	Root       []byte
	Count      uint64
	Complete   bool
	Incomplete []Reason
	Entries    []Entry // sorted by path bytes, paths unique
	Exit       Exit
	Ended      time.Time
	Stats      Stats
	// CheckpointHead is the SHA-256 of the last checkpoint's envelope file
	// bytes; nil when the session made no checkpoint.
	CheckpointHead []byte
	// Excluded are the subtrees summarized by the policy's exclusions.
	Excluded []Excluded
	// Violations are the changes on protected paths the sweep found.
	Violations []Violation
	// Applied is the change set after the sweep, read again from the swept
	// upper layer; it must be nil when there are no violations (the change
	// set is then Entries). See AppliedEntries.
	Applied []Entry
	// AppliedRoot and AppliedCount are the Merkle root and size of
	// AppliedEntries; SignStatement sets them.
	AppliedRoot  []byte
	AppliedCount uint64
	// Logs are the agent's stdout and stderr as the supervisor kept them,
	// sorted by name; nil when it kept none.
	Logs []OutputLog
	// Egress is what the proxy saw of the agent's connections (run
	// --network proxy), sorted by CompareEgress; nil when it saw none or
	// the run had no proxy.
	Egress []Egress
}

// Exit is how the agent's main process ended.
type Exit struct {
	Code   int
	Signal string // signal name such as "SIGKILL"; empty unless killed by one
	// Unknown: no one saw how the agent ended (a statement made by
	// recover); Code is then 0 and Signal empty.
	Unknown bool
	// Interrupt is the first interrupt (such as "SIGINT" for a Ctrl-C)
	// the supervisor received and passed on to the agent while it ran, or
	// "SIGINT" for a Ctrl-C typed into the agent's pseudo-terminal; empty
	// when none came.
	Interrupt string
}

// String is the exit as a person reads it: "0", "130 (SIGINT)", "unknown",
// "0, after an interrupt (SIGINT)".
func (e Exit) String() string {
	s := fmt.Sprint(e.Code)
	switch {
	case e.Unknown:
		s = "unknown"
	case e.Signal != "":
		s = fmt.Sprintf("%d (%s)", e.Code, e.Signal)
	}
	if e.Interrupt != "" {
		s += ", after an interrupt (" + e.Interrupt + ")"
	}
	return s
}

// Stats counts the work behind a statement.
type Stats struct {
	UpperEntries uint64 // entries read in the upper layer
	LowerEntries uint64 // entries read in the lower layer
	BytesHashed  uint64
}

type statementJSON struct {
	SessionID      string          `json:"session_id"`
	Launch         string          `json:"launch_sha256"`
	KeyID          string          `json:"key_id"`
	Workspace      Bytes           `json:"workspace"`
	Root           string          `json:"root"`
	Count          uint64          `json:"count,string"`
	Complete       bool            `json:"complete"`
	Incomplete     []reasonJSON    `json:"incomplete"`
	Changes        entryList       `json:"changes"`
	Exit           exitJSON        `json:"exit"`
	Ended          string          `json:"ended"`
	Stats          statsJSON       `json:"stats"`
	CheckpointHead string          `json:"checkpoint_head,omitempty"`
	Excluded       []excludedJSON  `json:"excluded,omitempty"`
	Violations     []violationJSON `json:"violations,omitempty"`
	AppliedRoot    string          `json:"applied_root"`
	AppliedCount   uint64          `json:"applied_count,string"`
	Applied        entryList       `json:"applied,omitempty"`
	Logs           []outputLogJSON `json:"logs,omitempty"`
	Egress         []egressJSON    `json:"egress,omitempty"`
}

type reasonJSON struct {
	Code   Code  `json:"code"`
	Path   Path  `json:"path,omitempty"`
	Detail Bytes `json:"detail"`
}

type entryJSON struct {
	Path   Path       `json:"path"`
	Change Change     `json:"change"`
	Old    *stateJSON `json:"old,omitempty"`
	New    *stateJSON `json:"new,omitempty"`
}

type stateJSON struct {
	Type    Type        `json:"type"`
	Mode    uint32      `json:"mode"`
	UID     uint32      `json:"uid"`
	GID     uint32      `json:"gid"`
	Size    uint64      `json:"size,string"`
	MtimeNS int64       `json:"mtime_ns,string"`
	SHA256  string      `json:"sha256,omitempty"`
	Target  Path        `json:"target,omitempty"`
	Rdev    uint64      `json:"rdev,omitzero,string"`
	Xattrs  []xattrJSON `json:"xattrs,omitempty"`
	Link    Path        `json:"link,omitempty"`
}

type xattrJSON struct {
	Name  Bytes  `json:"name"`
	Value []byte `json:"value"`
}

type exitJSON struct {
	Code      int    `json:"code"`
	Signal    string `json:"signal,omitempty"`
	Unknown   bool   `json:"unknown,omitempty"`
	Interrupt string `json:"interrupt,omitempty"`
}

type statsJSON struct {
	UpperEntries uint64 `json:"upper_entries,string"`
	LowerEntries uint64 `json:"lower_entries,string"`
	BytesHashed  uint64 `json:"bytes_hashed,string"`
}

func hexOrEmpty(b []byte) string {
	if b == nil {
		return ""
	}
	return hex.EncodeToString(b)
}

func stateToJSON(s *State) *stateJSON {
	if s == nil {
		return nil
	}
	j := &stateJSON{
		Type: s.Type, Mode: s.Mode, UID: s.UID, GID: s.GID, Size: s.Size, MtimeNS: s.MtimeNS,
		SHA256: hexOrEmpty(s.SHA256), Target: s.Target, Rdev: s.Rdev, Link: s.Link,
	}
	for _, x := range s.Xattrs {
		v := x.Value
		if v == nil {
			v = []byte{}
		}
		j.Xattrs = append(j.Xattrs, xattrJSON{Name: Bytes(x.Name), Value: v})
	}
	return j
}

func stateFromJSON(j *stateJSON) (*State, error) {
	if j == nil {
		return nil, nil
	}
	s := &State{
		Type: j.Type, Mode: j.Mode, UID: j.UID, GID: j.GID, Size: j.Size, MtimeNS: j.MtimeNS,
		Target: j.Target, Rdev: j.Rdev, Link: j.Link,
	}
	if j.SHA256 != "" {
		d, err := parseHex("sha256", j.SHA256)
		if err != nil {
			return nil, err
		}
		s.SHA256 = d
	}
	for _, x := range j.Xattrs {
		s.Xattrs = append(s.Xattrs, Xattr{Name: string(x.Name), Value: nilIfEmpty(x.Value)})
	}
	return s, nil
}

func (st *Statement) toJSON() *statementJSON {
	j := &statementJSON{
		SessionID:      st.SessionID,
		Launch:         hexOrEmpty(st.Launch),
		KeyID:          st.KeyID,
		Workspace:      st.Workspace,
		Root:           hexOrEmpty(st.Root),
		Count:          st.Count,
		Complete:       st.Complete,
		Incomplete:     make([]reasonJSON, len(st.Incomplete)),
		Changes:        entryList{entries: st.Entries},
		Applied:        entryList{entries: st.Applied},
		Exit:           exitJSON(st.Exit),
		Ended:          formatTime(st.Ended),
		Stats:          statsJSON(st.Stats),
		CheckpointHead: hexOrEmpty(st.CheckpointHead),
		Excluded:       excludedToJSON(st.Excluded),
		Violations:     violationsToJSON(st.Violations),
		AppliedRoot:    hexOrEmpty(st.AppliedRoot),
		AppliedCount:   st.AppliedCount,
		Logs:           logsToJSON(st.Logs),
		Egress:         egressToJSON(st.Egress),
	}
	for i, r := range st.Incomplete {
		j.Incomplete[i] = reasonJSON{Code: r.Code, Path: r.Path, Detail: Bytes(r.Detail)}
	}
	return j
}

func entryToJSON(e *Entry) entryJSON {
	return entryJSON{Path: e.Path, Change: e.Change, Old: stateToJSON(e.Old), New: stateToJSON(e.New)}
}

// entryList is a list of entries in JSON, encoded from entries one at a
// time, so that a statement being signed is not held a second time in
// its JSON form. It is decoded into entries too, one JSON form at a time;
// when one has no model form (which fromJSON then reports), the whole
// list is held in JSON form, in parsed, instead.
type entryList struct {
	entries []Entry
	parsed  []entryJSON
}

func (l entryList) MarshalJSONTo(enc *jsontext.Encoder) error {
	if l.entries == nil {
		return json.MarshalEncode(enc, l.parsed)
	}
	if err := enc.WriteToken(jsontext.BeginArray); err != nil {
		return err
	}
	for i := range l.entries {
		j := entryToJSON(&l.entries[i])
		if err := json.MarshalEncode(enc, &j); err != nil {
			return err
		}
	}
	return enc.WriteToken(jsontext.EndArray)
}

func (l *entryList) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	if dec.PeekKind() != '[' {
		return json.UnmarshalDecode(dec, &l.parsed)
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	l.entries = []Entry{}
	for dec.PeekKind() != ']' {
		var j entryJSON
		if err := json.UnmarshalDecode(dec, &j); err != nil {
			return err
		}
		if l.parsed != nil {
			l.parsed = append(l.parsed, j)
			continue
		}
		e, err := j.entry()
		if err != nil {
			for i := range l.entries {
				l.parsed = append(l.parsed, entryToJSON(&l.entries[i]))
			}
			l.parsed = append(l.parsed, j)
			l.entries = nil
			continue
		}
		l.entries = append(l.entries, e)
	}
	_, err := dec.ReadToken()
	return err
}

// fromJSON returns the list's entries, or the error of the first entry
// in it with no model form.
func (l *entryList) fromJSON(what string) ([]Entry, error) {
	if l.entries != nil {
		return l.entries, nil
	}
	entries := make([]Entry, len(l.parsed))
	for i := range l.parsed {
		e, err := l.parsed[i].entry()
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", what, string(l.parsed[i].Path), err)
		}
		entries[i] = e
	}
	return entries, nil
}

func (j *entryJSON) entry() (Entry, error) {
	e := Entry{Path: j.Path, Change: j.Change}
	var err error
	if e.Old, err = stateFromJSON(j.Old); err != nil {
		return Entry{}, err
	}
	if e.New, err = stateFromJSON(j.New); err != nil {
		return Entry{}, err
	}
	return e, nil
}

// EncodedSizes returns, for each of entries, the bytes it adds to the
// payload of a statement that lists it: its JSON and the comma that
// separates it from the next, and with subjects (for a statement whose
// changes are entries or a prefix of them) its subject's as well, if it
// has one (see StatementSubjects). The payload is encoded as
// SignStatement encodes it, so the sizes are exact; nothing but one
// entry's JSON form is held at a time.
func EncodedSizes(entries []Entry, subjects bool) ([]int, error) {
	enc := jsontext.NewEncoder(io.Discard, encodeOptions)
	// The encoder ends each value with a newline, as long as the comma.
	size := func(v any) (int, error) {
		before := enc.OutputOffset()
		err := json.MarshalEncode(enc, v)
		return int(enc.OutputOffset() - before), err
	}
	sizes := make([]int, len(entries))
	files := 1 // the change-set subject
	for i := range entries {
		j := entryToJSON(&entries[i])
		n, err := size(&j)
		if err != nil {
			return nil, fmt.Errorf("entry %q: %w", string(entries[i].Path), err)
		}
		if name, digest, ok := fileSubject(&entries[i]); ok && subjects && files < MaxSubjects {
			files++
			m, err := size(&subject{Name: name, Digest: digestSet{SHA256: digest}})
			if err != nil {
				return nil, fmt.Errorf("entry %q: %w", string(entries[i].Path), err)
			}
			n += m
		}
		sizes[i] = n
	}
	return sizes, nil
}

// fromJSON converts a decoded predicate, refusing values with no model form.
func (j *statementJSON) fromJSON() (*Statement, error) {
	st := &Statement{
		SessionID: j.SessionID,
		KeyID:     j.KeyID,
		Workspace: j.Workspace,
		Count:     j.Count,
		Complete:  j.Complete,
		Exit:      Exit(j.Exit),
		Stats:     Stats(j.Stats),

		Excluded:     excludedFromJSON(j.Excluded),
		Violations:   violationsFromJSON(j.Violations),
		AppliedCount: j.AppliedCount,
	}
	var err error
	if st.AppliedRoot, err = parseHex("applied root", j.AppliedRoot); err != nil {
		return nil, err
	}
	if len(st.Violations) > 0 {
		st.Applied = []Entry{}
	}
	applied, err := j.Applied.fromJSON("applied entry")
	if err != nil {
		return nil, err
	}
	if len(applied) > 0 {
		st.Applied = applied
	}
	if st.Logs, err = logsFromJSON(j.Logs); err != nil {
		return nil, err
	}
	if st.Egress, err = egressFromJSON(j.Egress); err != nil {
		return nil, err
	}
	if st.Launch, err = parseHex("launch digest", j.Launch); err != nil {
		return nil, err
	}
	if st.Root, err = parseHex("root", j.Root); err != nil {
		return nil, err
	}
	if j.CheckpointHead != "" {
		if st.CheckpointHead, err = parseHex("checkpoint head", j.CheckpointHead); err != nil {
			return nil, err
		}
	}
	if st.Ended, err = parseTime("ended", j.Ended); err != nil {
		return nil, err
	}
	for _, r := range j.Incomplete {
		st.Incomplete = append(st.Incomplete, Reason{Code: r.Code, Path: r.Path, Detail: string(r.Detail)})
	}
	if st.Entries, err = j.Changes.fromJSON("entry"); err != nil {
		return nil, err
	}
	if len(st.Entries) == 0 {
		st.Entries = nil
	}
	return st, nil
}

var knownCodes = map[Code]bool{
	NoMountID: true, OtherMount: true, Submount: true, Unreadable: true, Vanished: true,
	DigestCap: true, EntryBudget: true, TimeBudget: true, DirEntryLimit: true, RootMissing: true,
	LowerChanged: true, AgentMount: true, AgentOutlived: true, CapSysAdmin: true, UnobservedEnd: true,
	Unstable: true, SandboxWeakened: true, PathLimit: true, Conflict: true, UpperLimit: true,
}

var knownTypes = map[Type]bool{
	File: true, Dir: true, Symlink: true, FIFO: true, Socket: true, CharDev: true, BlockDev: true,
}

// Valid reports whether r has a known code, a valid or empty path, and a
// detail without NUL.
func (r *Reason) Valid() error {
	if !knownCodes[r.Code] {
		return fmt.Errorf("unknown reason code %q", string(r.Code))
	}
	if r.Path != "" {
		if err := r.Path.Valid(); err != nil {
			return fmt.Errorf("reason %q: %w", string(r.Code), err)
		}
	}
	if strings.IndexByte(r.Detail, 0) >= 0 {
		return fmt.Errorf("reason %q: detail %q holds NUL", string(r.Code), r.Detail)
	}
	return nil
}

// Valid reports whether s is a possible state: a known type, mode within
// 07777, size only for files and symlinks, a digest of 32 bytes only for
// files, a non-empty target (without NUL) exactly for symlinks, rdev only
// for devices, xattrs with non-empty names without NUL sorted and unique,
// and a link (a valid path) only for files.
func (s *State) Valid() error {
	if !knownTypes[s.Type] {
		return fmt.Errorf("unknown file type %q", string(s.Type))
	}
	if s.Mode&^0o7777 != 0 {
		return fmt.Errorf("mode %#o has bits beyond 07777", s.Mode)
	}
	if s.Size != 0 && s.Type != File && s.Type != Symlink {
		return fmt.Errorf("%s with size %d", s.Type, s.Size)
	}
	if s.SHA256 != nil && (len(s.SHA256) != 32 || s.Type != File) {
		return fmt.Errorf("%s with a digest of %d bytes", s.Type, len(s.SHA256))
	}
	if (s.Target != "") != (s.Type == Symlink) {
		return fmt.Errorf("%s with target %q", s.Type, string(s.Target))
	}
	if strings.IndexByte(string(s.Target), 0) >= 0 {
		return fmt.Errorf("target %q holds NUL", string(s.Target))
	}
	if s.Rdev != 0 && s.Type != CharDev && s.Type != BlockDev {
		return fmt.Errorf("%s with rdev %d", s.Type, s.Rdev)
	}
	for i, x := range s.Xattrs {
		if x.Name == "" || strings.IndexByte(x.Name, 0) >= 0 {
			return fmt.Errorf("xattr name %q is empty or holds NUL", x.Name)
		}
		if uint64(len(x.Value)) > math.MaxUint32 {
			return fmt.Errorf("xattr %q: value of %d bytes", x.Name, len(x.Value))
		}
		if i > 0 && s.Xattrs[i-1].Name >= x.Name {
			return fmt.Errorf("xattrs %q and %q not sorted and unique", s.Xattrs[i-1].Name, x.Name)
		}
	}
	if s.Link != "" {
		if s.Type != File {
			return fmt.Errorf("%s with link %q", s.Type, string(s.Link))
		}
		if err := s.Link.Valid(); err != nil {
			return fmt.Errorf("link: %w", err)
		}
	}
	return nil
}

// Valid reports whether e is a possible entry: a valid path, a known change,
// Old nil exactly for Added and New nil exactly for Deleted, valid states,
// differing types for TypeChange, equal types for Modified and Metadata,
// and directories on both sides for Replaced.
func (e *Entry) Valid() error {
	if err := e.validate(); err != nil {
		return fmt.Errorf("entry %q: %w", string(e.Path), err)
	}
	return nil
}

func (e *Entry) validate() error {
	if err := e.Path.Valid(); err != nil {
		return err
	}
	switch e.Change {
	case Added, Modified, Metadata, Deleted, Replaced, TypeChange:
	default:
		return fmt.Errorf("unknown change %q", string(e.Change))
	}
	if (e.Old == nil) != (e.Change == Added) {
		return fmt.Errorf("%s entry with old state present=%t", e.Change, e.Old != nil)
	}
	if (e.New == nil) != (e.Change == Deleted) {
		return fmt.Errorf("%s entry with new state present=%t", e.Change, e.New != nil)
	}
	for _, s := range []*State{e.Old, e.New} {
		if s == nil {
			continue
		}
		if err := s.Valid(); err != nil {
			return err
		}
	}
	switch e.Change {
	case TypeChange:
		if e.Old.Type == e.New.Type {
			return fmt.Errorf("typechange entry from %s to %s", e.Old.Type, e.New.Type)
		}
	case Modified, Metadata:
		if e.Old.Type != e.New.Type {
			return fmt.Errorf("%s entry from %s to %s", e.Change, e.Old.Type, e.New.Type)
		}
	case Replaced:
		if e.Old.Type != Dir || e.New.Type != Dir {
			return fmt.Errorf("replaced entry from %s to %s", e.Old.Type, e.New.Type)
		}
	}
	return nil
}

// validate checks the values of st, including that Root, Count and
// Complete agree with Entries and Incomplete.
func (st *Statement) validate() error {
	if err := checkSessionID(st.SessionID); err != nil {
		return err
	}
	if len(st.Launch) != 32 {
		return fmt.Errorf("launch digest of %d bytes", len(st.Launch))
	}
	if err := checkKeyID(st.KeyID); err != nil {
		return err
	}
	if st.Workspace == "" || strings.IndexByte(string(st.Workspace), 0) >= 0 {
		return fmt.Errorf("workspace %q is empty or holds NUL", string(st.Workspace))
	}
	if len(st.Root) != 32 {
		return fmt.Errorf("root of %d bytes", len(st.Root))
	}
	if st.Count != uint64(len(st.Entries)) {
		return fmt.Errorf("count %d but %d entries", st.Count, len(st.Entries))
	}
	if st.Complete != (len(st.Incomplete) == 0) {
		return fmt.Errorf("complete is %t with %d reasons", st.Complete, len(st.Incomplete))
	}
	for i := range st.Incomplete {
		if err := st.Incomplete[i].Valid(); err != nil {
			return err
		}
	}
	if err := checkOrder(st.Entries); err != nil {
		return err
	}
	for i := range st.Entries {
		if err := st.Entries[i].Valid(); err != nil {
			return err
		}
	}
	for _, sig := range []string{st.Exit.Signal, st.Exit.Interrupt} {
		if sig != "" && (len(sig) > 32 || !strings.HasPrefix(sig, "SIG") ||
			strings.ContainsFunc(sig, func(r rune) bool { return r <= 0x20 || r >= 0x7F })) {
			return fmt.Errorf("exit signal %q is not a signal name", sig)
		}
	}
	if st.Exit.Unknown && (st.Exit.Code != 0 || st.Exit.Signal != "") {
		return fmt.Errorf("exit unknown with code %d and signal %q", st.Exit.Code, st.Exit.Signal)
	}
	if st.Exit.Code < math.MinInt32 || st.Exit.Code > math.MaxInt32 {
		return fmt.Errorf("exit code %d out of range", st.Exit.Code)
	}
	if st.CheckpointHead != nil && len(st.CheckpointHead) != 32 {
		return fmt.Errorf("checkpoint head of %d bytes", len(st.CheckpointHead))
	}
	if err := st.validatePolicy(); err != nil {
		return err
	}
	if err := validateLogs(st.Logs); err != nil {
		return err
	}
	if err := validateEgress(st.Egress); err != nil {
		return err
	}
	return checkTime("ended", st.Ended)
}

// checkRoot recomputes the Merkle root of st's entries and compares it with
// the signed root.
func (st *Statement) checkRoot() error {
	root, err := MerkleRoot(st.Entries)
	if err != nil || !bytes.Equal(root, st.Root) {
		return ErrNotVerified
	}
	applied, err := MerkleRoot(st.AppliedEntries())
	if err != nil || !bytes.Equal(applied, st.AppliedRoot) {
		return ErrNotVerified
	}
	return nil
}
