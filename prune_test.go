package layerseal

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/privtest"
	"github.com/layerseal/layerseal/policy"
)

// storeFixture makes sessions in a state dir by hand, as runs leave them.
type storeFixture struct {
	t     *testing.T
	store *Store
	key   *attest.Signer
	ws    string
}

func newStoreFixture(t *testing.T) *storeFixture {
	t.Helper()
	privtest.Require(t)
	dir := t.TempDir()
	_, priv, _ := ed25519.GenerateKey(nil)
	key, err := attest.NewSigner(priv)
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	return &storeFixture{t: t, store: OpenStore(filepath.Join(dir, "state")), key: key, ws: ws}
}

// session makes a session whose run ended at ended with a change in its
// upper layer: staged (a statement, no journal), applied or discarded
// (a journal of that state written at ended), or interrupted (no
// statement).
func (f *storeFixture) session(state string, ended time.Time) string {
	f.t.Helper()
	id := attest.NewSessionID()
	d, err := f.store.create(id)
	if err != nil {
		f.t.Fatal(err)
	}
	rec := sessionRecord{ID: id, Workspace: f.ws, Out: filepath.Join(filepath.Dir(f.ws), "out-"+id), PublicKey: f.key.Public(), Started: ended.Add(-time.Second)}
	if err := d.writeRecord(rec); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.upper(), "new"), []byte("x"), 0o644); err != nil {
		f.t.Fatal(err)
	}
	if state == StateInterrupted {
		return id
	}
	env, err := attest.SignStatement(f.key, &attest.Statement{SessionID: id, Launch: sha([]byte("launch")), Workspace: attest.Bytes(f.ws), Ended: ended})
	if err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(string(d), StatementFile), env, 0o600); err != nil {
		f.t.Fatal(err)
	}
	j := map[string]string{StateApplied: journalApplied, StateDiscarded: journalDiscarded}[state]
	if j != "" {
		b, _ := json.Marshal(journal{State: j, Time: ended})
		if err := os.WriteFile(d.journal(), b, 0o600); err != nil {
			f.t.Fatal(err)
		}
		if j == journalDiscarded {
			os.RemoveAll(d.upper())
		}
	}
	return id
}

// prune prunes and returns the ids removed and the sessions kept, and
// checks that the state dir agrees.
func (f *storeFixture) prune(opt PruneOptions) (removed map[string]Pruned, kept map[string]Pruned) {
	f.t.Helper()
	list, err := f.store.Prune(opt)
	if err != nil {
		f.t.Fatal(err)
	}
	removed, kept = map[string]Pruned{}, map[string]Pruned{}
	for _, p := range list {
		_, err := os.Lstat(string(f.store.session(p.ID)))
		switch {
		case p.Removed && err == nil:
			f.t.Errorf("session %s: reported removed, still in the state dir", p.ID)
		case !p.Removed && err != nil:
			f.t.Errorf("session %s: reported kept (%s), gone from the state dir: %v", p.ID, p.Why, err)
		case p.Removed:
			removed[p.ID] = p
		default:
			kept[p.ID] = p
		}
	}
	if left, _ := filepath.Glob(filepath.Join(f.store.Dir(), pruningDir, "*")); len(left) > 0 {
		f.t.Errorf("left in the pruning dir: %v", left)
	}
	return removed, kept
}

// TestPrune: applied and discarded sessions go; a staged and an
// interrupted one stay, with a reason that names --force; a running one
// stays even with Force; Force removes the staged one and says its change
// set went with it.
func TestPrune(t *testing.T) {
	f := newStoreFixture(t)
	now := time.Now()
	applied := f.session(StateApplied, now)
	discarded := f.session(StateDiscarded, now)
	staged := f.session(StateStaged, now)
	interrupted := f.session(StateInterrupted, now)
	running := f.session(StateStaged, now)
	lock, err := f.store.lockWorkspace(f.ws, statOf(t, f.ws), running)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.release()

	removed, kept := f.prune(PruneOptions{})
	if len(removed) != 2 || !removed[applied].Removed || !removed[discarded].Removed {
		t.Errorf("removed %v, want the applied and the discarded session", removed)
	}
	if !removed[applied].ChangeSet || removed[discarded].ChangeSet {
		t.Errorf("change set removed: applied %v (its upper layer held a file), discarded %v (it had none)", removed[applied].ChangeSet, removed[discarded].ChangeSet)
	}
	for _, id := range []string{staged, interrupted} {
		if p, ok := kept[id]; !ok || !strings.Contains(p.Why, "--force") {
			t.Errorf("session %s (%s): kept %v, why %q; want kept, naming --force", id, p.State, ok, p.Why)
		}
	}
	if p := kept[running]; p.State != StateRunning || p.Why != "it is running" {
		t.Errorf("running session: state %q, why %q", p.State, p.Why)
	}

	removed, kept = f.prune(PruneOptions{Force: true})
	if len(removed) != 2 || !removed[staged].ChangeSet || !removed[interrupted].ChangeSet {
		t.Errorf("with Force: removed %v, want the staged and the interrupted session with their change sets", removed)
	}
	if _, ok := kept[running]; !ok || len(kept) != 1 {
		t.Errorf("with Force: kept %v, want only the running session", kept)
	}
	lock.release()
	if removed, _ = f.prune(PruneOptions{}); len(removed) != 0 {
		t.Errorf("a staged session whose run ended: removed %v without Force", removed)
	}
	if list, err := f.store.Sessions(); err != nil || len(list) != 1 || list[0].ID != running || list[0].State != StateStaged {
		t.Errorf("sessions left: %+v, %v", list, err)
	}
}

// TestPruneOlderThan: OlderThan keeps sessions that finished more
// recently (by their journal's time: an old session applied lately is
// recent), and a negative age is refused.
func TestPruneOlderThan(t *testing.T) {
	f := newStoreFixture(t)
	now := time.Now()
	old := f.session(StateDiscarded, now.Add(-3*time.Hour))
	recent := f.session(StateApplied, now.Add(-10*time.Minute))
	removed, kept := f.prune(PruneOptions{OlderThan: time.Hour, Now: now})
	if _, ok := removed[old]; !ok || len(removed) != 1 {
		t.Errorf("removed %v, want only %s", removed, old)
	}
	if p := kept[recent]; !strings.Contains(p.Why, "10m0s ago, less than 1h0m0s") {
		t.Errorf("recent session kept because %q", p.Why)
	}
	if removed, _ = f.prune(PruneOptions{OlderThan: time.Hour, Now: now.Add(2 * time.Hour)}); len(removed) != 1 {
		t.Errorf("two hours later: removed %v, want %s", removed, recent)
	}
	if _, err := f.store.Prune(PruneOptions{OlderThan: -time.Hour}); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("negative age: %v", err)
	}
}

// TestPruneFinishesEarlierPrune: what a prune that died left in the
// pruning dir is removed by the next, and no session lists it meanwhile.
func TestPruneFinishesEarlierPrune(t *testing.T) {
	f := newStoreFixture(t)
	id := f.session(StateApplied, time.Now())
	if err := os.MkdirAll(filepath.Join(f.store.Dir(), pruningDir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(string(f.store.session(id)), filepath.Join(f.store.Dir(), pruningDir, id)); err != nil {
		t.Fatal(err)
	}
	if list, err := f.store.Sessions(); err != nil || len(list) != 0 {
		t.Errorf("sessions during a prune: %+v, %v", list, err)
	}
	f.prune(PruneOptions{}) // checks the pruning dir is empty after
}

// TestUnreadableRecord: a session whose record cannot be read (damaged,
// or written by a layerseal whose key form differs) is listed as
// unreadable with where its upper layer is, is never pruned even with
// Force, and does not stop finding, listing or pruning the others.
func TestUnreadableRecord(t *testing.T) {
	f := newStoreFixture(t)
	old := time.Now().Add(-48 * time.Hour)
	good := f.session(StateApplied, old)
	bad := f.session(StateApplied, old)
	rec := filepath.Join(string(f.store.session(bad)), "session.json")
	b, err := os.ReadFile(rec)
	if err != nil {
		t.Fatal(err)
	}
	// The key as a bare ed25519 key, as records held it before keys
	// named their algorithm.
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m["public_key"] = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
	b, _ = json.Marshal(m)
	if err := os.WriteFile(rec, b, 0o600); err != nil {
		t.Fatal(err)
	}

	list, err := f.store.Sessions()
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]SessionInfo{}
	for _, s := range list {
		states[s.ID] = s
	}
	if s := states[bad]; s.State != StateUnreadable || !strings.Contains(s.Detail, "upper") {
		t.Errorf("unreadable session listed as %+v", s)
	}
	if s := states[good]; s.State != StateApplied {
		t.Errorf("readable session listed as %+v", s)
	}
	if _, err := f.store.Session(filepath.Join(filepath.Dir(f.ws), "out-"+good)); err != nil {
		t.Errorf("finding a session by its output dir beside an unreadable one: %v", err)
	}
	if _, err := f.store.Session(bad); err == nil {
		t.Error("the unreadable session was found by its id")
	}
	removed, _ := f.prune(PruneOptions{Force: true})
	if _, ok := removed[good]; !ok {
		t.Error("the readable applied session was not pruned")
	}
	if _, err := os.Lstat(rec); err != nil {
		t.Errorf("the unreadable session was pruned: %v", err)
	}
}

// TestApplyLeaveRemoval: with LeaveRemoval an apply moves the session's
// upper layer, whole, into the pruning dir after the journal says applied;
// RemovePruned, or failing that the next Prune, removes it there.
func TestApplyLeaveRemoval(t *testing.T) {
	privtest.Require(t)
	for _, finish := range []string{"RemovePruned", "Prune"} {
		t.Run(finish, func(t *testing.T) {
			ws, state := t.TempDir(), filepath.Join(t.TempDir(), "state")
			res := runAgent(t, ws, state, attest.Policy{Apply: policy.ApplyStage}, fmt.Sprintf("mkdir d many; echo b > d/b; echo a > a; cd many; seq %d | xargs touch", LeaveRemovalMin))
			store := OpenStore(state)
			id := res.Statement.SessionID
			if store.Pruning() != "" {
				t.Fatalf("the pruning dir holds something before the apply")
			}
			if _, err := store.Apply(id, ApplyOptions{LeaveRemoval: true}); err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(filepath.Join(ws, "d/b")); err != nil || string(b) != "b\n" {
				t.Errorf("d/b in the workspace: %q, %v", b, err)
			}
			d := store.session(id)
			if j, err := d.readJournal(); err != nil || j == nil || j.State != journalApplied {
				t.Errorf("journal %+v, %v; want applied", j, err)
			}
			for _, p := range []string{d.upper(), d.work()} {
				if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s is still in the session: %v", p, err)
				}
			}
			moved := filepath.Join(state, pruningDir, id+".layers")
			if b, err := os.ReadFile(filepath.Join(moved, "upper", "d", "b")); err != nil || string(b) != "b\n" {
				t.Errorf("the upper layer was not moved whole to %s: %q, %v", moved, b, err)
			}
			if got := store.Pruning(); got != filepath.Join(state, pruningDir) {
				t.Errorf("Pruning() = %q with the layers there", got)
			}
			if _, err := store.Apply(id, ApplyOptions{LeaveRemoval: true}); !errors.Is(err, ErrAlreadyApplied) {
				t.Errorf("second apply: %v, want ErrAlreadyApplied", err)
			}
			if finish == "RemovePruned" {
				if err := store.RemovePruned(); err != nil {
					t.Fatal(err)
				}
			} else if _, err := store.Prune(PruneOptions{}); err != nil {
				t.Fatal(err)
			}
			if left, _ := filepath.Glob(filepath.Join(state, pruningDir, "*")); len(left) > 0 || store.Pruning() != "" {
				t.Errorf("left in the pruning dir after %s: %v", finish, left)
			}
		})
	}
}
