package layerseal

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
)

// Bounds on what agentCommits reads of the agent's repository.
const (
	// agentMaxCommits is the most new commits a branch takes over.
	agentMaxCommits = 10000
	// agentMaxObjects is the most new objects (commits, trees, blobs).
	agentMaxObjects = 200000
	// agentMaxMeta is the largest commit or tree read into memory, and
	// agentMaxMetaTotal the most bytes of them all.
	agentMaxMeta      = 16 << 20
	agentMaxMetaTotal = 512 << 20
	// agentMaxBlob is the largest blob taken over.
	agentMaxBlob = 1 << 30
	// agentMaxRef is the largest HEAD, ref or packed-refs file read.
	agentMaxRef = 1 << 20
)

// agentRepo is the agent's repository as the session left it: the
// merged view of the workspace's .git (the upper layer over the lower),
// as the signed statement lists it. It is only ever read, by this code,
// never by git: git would take config, hooks, alternates, grafts and
// replace refs from it. Files of the upper layer are checked against the
// statement's digests as they are read; objects against their ids.
type agentRepo struct {
	upper   int // the upper layer, O_PATH
	ws      int // the workspace root, O_PATH
	changed map[attest.Path]*attest.Entry
	hexLen  int // 40 (SHA-1) or 64 (SHA-256)
	// packs are the pack files the agent's git wrote, opened when an
	// object is not loose (packsErr: why they could not be).
	packs    []*agentPack
	packsErr error
	opened   bool
	inflated uint64 // bytes made by resolving deltas, for agentMaxInflate
}

func newAgentRepo(upper, ws int, entries []attest.Entry, hexLen int) *agentRepo {
	r := &agentRepo{upper: upper, ws: ws, changed: make(map[attest.Path]*attest.Entry), hexLen: hexLen}
	for i := range entries {
		if attest.Within(entries[i].Path, ".git") {
			r.changed[entries[i].Path] = &entries[i]
		}
	}
	return r
}

func (r *agentRepo) newHash() hash.Hash {
	if r.hexLen == 64 {
		return sha256.New()
	}
	return sha1.New()
}

// open opens p of the merged view for reading: from the upper layer when
// the change set lists it (nil, no error, when it removed it or it is not
// a regular file), else from the workspace. want is the statement's
// digest the bytes must have (nil for a workspace file).
func (r *agentRepo) open(p attest.Path) (f *os.File, want []byte, size uint64, err error) {
	for a := parentPath(p); a != attest.Root; a = parentPath(a) {
		if e := r.changed[a]; e != nil && (e.New == nil || e.New.Type != attest.Dir) {
			return nil, nil, 0, nil // beneath a removed directory
		}
	}
	from := r.ws
	if e := r.changed[p]; e != nil {
		if e.New == nil || e.New.Type != attest.File {
			return nil, nil, 0, nil
		}
		if e.New.SHA256 == nil {
			return nil, nil, 0, fmt.Errorf("the agent's %q was not hashed (over the digest cap)", string(p))
		}
		from, want, size = r.upper, e.New.SHA256, e.New.Size
	}
	fd, err := linux.OpenBeneath(from, string(p), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		if from == r.ws && (errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR)) {
			return nil, nil, 0, nil
		}
		return nil, nil, 0, fmt.Errorf("the agent's %q: %w", string(p), unwrapPath(err))
	}
	f = os.NewFile(uintptr(fd), string(p))
	st, err := linux.Lstat(fd, "")
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, nil, 0, nil
	}
	if want == nil {
		size = uint64(st.Size)
	}
	return f, want, size, nil
}

// read reads p of the merged view whole, at most limit bytes; nil when it
// is absent.
func (r *agentRepo) read(p attest.Path, limit uint64) ([]byte, error) {
	f, want, size, err := r.open(p)
	if f == nil || err != nil {
		return nil, err
	}
	defer f.Close()
	if size > limit {
		return nil, fmt.Errorf("the agent's %q is over %d bytes", string(p), limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("the agent's %q: %w", string(p), err)
	}
	if uint64(len(b)) > limit || want != nil && (uint64(len(b)) != size || !bytes.Equal(sha(b), want)) {
		return nil, fmt.Errorf("the agent's %q does not hold what the statement lists", string(p))
	}
	return b, nil
}

// head resolves the agent's HEAD in the merged view: a commit id, or a
// branch through its loose ref or packed-refs. ok is false when it cannot
// be resolved (an unborn branch, a ref that is not a branch).
func (r *agentRepo) head() (id string, ok bool, err error) {
	b, err := r.read(".git/HEAD", agentMaxRef)
	if err != nil {
		return "", false, err
	}
	h := strings.TrimSpace(string(b))
	if r.isID(h) {
		return h, true, nil
	}
	ref, found := strings.CutPrefix(h, "ref: ")
	if !found || !strings.HasPrefix(ref, "refs/heads/") || strings.Contains(ref, "..") || strings.ContainsAny(ref, "\x00\\") || strings.Contains(ref, "//") {
		return "", false, nil
	}
	if b, err = r.read(attest.Path(".git/"+ref), agentMaxRef); err != nil {
		return "", false, err
	}
	if c := strings.TrimSpace(string(b)); r.isID(c) {
		return c, true, nil
	}
	if b, err = r.read(".git/packed-refs", agentMaxRef); err != nil {
		return "", false, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if c, name, found := strings.Cut(line, " "); found && name == ref && r.isID(c) {
			return c, true, nil
		}
	}
	return "", false, nil
}

func (r *agentRepo) isID(s string) bool { return len(s) == r.hexLen && isHex(s) }

// agentObjects are the new objects of the agent's commits, as a pack.
type agentObjects struct {
	Commits []string // newest first, as reached from HEAD
	Count   int
	pack    *os.File // the objects' entries, without header and trailer
}

func (o *agentObjects) Close() {
	if o != nil && o.pack != nil {
		o.pack.Close()
	}
}

// known answers whether the workspace's repository holds an object.
type known func(id string) (bool, error)

// agentCommits reads the commits reachable from tip that the workspace's
// repository does not hold (has says which it does), with every tree and
// blob they need that it does not hold, from the loose objects of the
// agent's repository, else from the pack files it added (agentPack). Each object's id is checked against its bytes; a
// missing object, a malformed commit or tree, an object of the wrong type
// and more than agentMaxCommits commits or agentMaxObjects objects are
// refused. Content addresses rule out cycles; a set of visited ids keeps a
// shared object read once.
func (r *agentRepo) agentCommits(tip string, has known) (*agentObjects, error) {
	tmp, err := os.CreateTemp("", "layerseal-pack-")
	if err != nil {
		return nil, err
	}
	os.Remove(tmp.Name())
	out := &agentObjects{pack: tmp}
	w := bufio.NewWriterSize(tmp, 1<<20)
	type want = treeLink
	stack := []want{{tip, "commit"}}
	seen := map[string]bool{tip: true} // pushed once at most
	meta := 0                          // bytes of commits and trees held
	for len(stack) > 0 {
		o := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if ok, err := has(o.id); err != nil {
			out.Close()
			return nil, err
		} else if ok {
			continue
		}
		if out.Count++; out.Count > agentMaxObjects {
			out.Close()
			return nil, fmt.Errorf("the agent's commits need more than %d new objects", agentMaxObjects)
		}
		if o.typ == "commit" {
			if len(out.Commits) >= agentMaxCommits {
				out.Close()
				return nil, fmt.Errorf("the agent's HEAD reaches more than %d new commits", agentMaxCommits)
			}
			out.Commits = append(out.Commits, o.id)
		}
		body, err := r.object(o.id, o.typ, w)
		if err != nil {
			out.Close()
			return nil, err
		}
		var links []want
		switch o.typ {
		case "commit":
			var tree string
			var parents []string
			tree, parents, err = commitLinks(body, r.isID)
			for _, p := range parents {
				links = append(links, want{p, "commit"})
			}
			links = append(links, want{tree, "tree"})
		case "tree":
			var ls []treeLink
			ls, err = treeLinks(body, r.hexLen/2)
			links = append(links, ls...)
		}
		if err != nil {
			out.Close()
			return nil, fmt.Errorf("the agent's %s %s: %w", o.typ, o.id, err)
		}
		if meta += len(body); meta > agentMaxMetaTotal {
			out.Close()
			return nil, fmt.Errorf("the agent's commits and trees are over %d bytes", agentMaxMetaTotal)
		}
		// Reversed, so that a commit's first parent is walked first.
		for i := len(links) - 1; i >= 0; i-- {
			if !seen[links[i].id] {
				seen[links[i].id] = true
				stack = append(stack, links[i])
			}
		}
	}
	if err := w.Flush(); err != nil {
		out.Close()
		return nil, err
	}
	return out, nil
}

// commitLinks returns the tree and the parents a commit's headers name.
func commitLinks(body []byte, isID func(string) bool) (tree string, parents []string, err error) {
	hdr, _, found := bytes.Cut(body, []byte("\n\n"))
	if !found {
		return "", nil, errors.New("no message")
	}
	lines := strings.Split(string(hdr), "\n")
	tree, ok := strings.CutPrefix(lines[0], "tree ")
	if !ok || !isID(tree) {
		return "", nil, errors.New("no tree")
	}
	for _, l := range lines[1:] {
		p, ok := strings.CutPrefix(l, "parent ")
		if !ok {
			break
		}
		if !isID(p) {
			return "", nil, fmt.Errorf("a bad parent %q", p)
		}
		parents = append(parents, p)
	}
	return tree, parents, nil
}

// treeLink is an object another names: its id and type.
type treeLink struct{ id, typ string }

// treeLinks returns the trees and blobs a tree names (gitlinks name
// commits of other repositories: not followed).
func treeLinks(body []byte, idLen int) ([]treeLink, error) {
	var out []treeLink
	for len(body) > 0 {
		sp := bytes.IndexByte(body, ' ')
		if sp < 0 {
			return nil, errors.New("a malformed entry")
		}
		mode := string(body[:sp])
		nul := bytes.IndexByte(body[sp:], 0)
		if nul < 0 || sp+nul+1+idLen > len(body) || nul == 1 {
			return nil, errors.New("a malformed entry")
		}
		id := hex.EncodeToString(body[sp+nul+1 : sp+nul+1+idLen])
		body = body[sp+nul+1+idLen:]
		switch mode {
		case "40000":
			out = append(out, treeLink{id, "tree"})
		case "100644", "100755", "120000":
			out = append(out, treeLink{id, "blob"})
		case "160000":
		default:
			return nil, fmt.Errorf("an entry of mode %q", mode)
		}
	}
	return out, nil
}

// packTypes are the pack entry types of the object types.
var packTypes = map[string]byte{"commit": 1, "tree": 2, "blob": 3}

// object reads the object id of type typ from the agent's repository
// (loose, else packed), checks it hashes to id, writes it to w as a pack entry and
// returns its body (nil for a blob, which is streamed).
func (r *agentRepo) object(id, typ string, w io.Writer) ([]byte, error) {
	p := attest.Path(".git/objects/" + id[:2] + "/" + id[2:])
	f, want, size, err := r.open(p)
	if err != nil {
		return nil, err
	}
	if f == nil || r.changed[p] == nil {
		f.Close()
		return r.packedObject(id, typ, w)
	}
	defer f.Close()
	fileHash := sha256.New()
	counted := &countingReader{r: io.TeeReader(io.LimitReader(f, int64(size)+1), fileHash)}
	zr, err := zlib.NewReader(bufio.NewReader(counted))
	if err != nil {
		return nil, fmt.Errorf("the agent's object %s: %w", id, err)
	}
	br := bufio.NewReader(zr)
	hdr, err := br.ReadSlice(0)
	if err != nil || len(hdr) > 32 {
		return nil, fmt.Errorf("the agent's object %s: a malformed header", id)
	}
	t, n, _ := strings.Cut(string(hdr[:len(hdr)-1]), " ")
	length, err := strconv.ParseUint(n, 10, 64)
	if t != typ || err != nil || n != strconv.FormatUint(length, 10) {
		return nil, fmt.Errorf("the agent's object %s is not a %s", id, typ)
	}
	limit := uint64(agentMaxMeta)
	if typ == "blob" {
		limit = agentMaxBlob
	}
	if length > limit {
		return nil, fmt.Errorf("the agent's %s %s is over %d bytes", typ, id, limit)
	}
	h := r.newHash()
	h.Write(hdr)
	// The pack entry: type and size, then the body deflated.
	if err := entryHeader(w, typ, length); err != nil {
		return nil, err
	}
	zw := zlib.NewWriter(w)
	var body bytes.Buffer
	dst := io.MultiWriter(h, zw)
	if typ != "blob" {
		dst = io.MultiWriter(h, zw, &body)
	}
	got, err := io.Copy(dst, io.LimitReader(br, int64(length)+1))
	if err != nil {
		return nil, fmt.Errorf("the agent's object %s: %w", id, err)
	}
	if uint64(got) != length {
		return nil, fmt.Errorf("the agent's object %s is not %d bytes long", id, length)
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	if hex.EncodeToString(h.Sum(nil)) != id {
		return nil, fmt.Errorf("the agent's object %s does not hash to its id (corrupt)", id)
	}
	// The whole file, as the statement lists it.
	if _, err := io.Copy(io.Discard, counted); err != nil {
		return nil, err
	}
	if counted.n != size || !bytes.Equal(fileHash.Sum(nil), want) {
		return nil, fmt.Errorf("the agent's %q does not hold what the statement lists", string(p))
	}
	return body.Bytes(), nil
}

// entryHeader writes a pack entry's header: its type and size.
func entryHeader(w io.Writer, typ string, length uint64) error {
	var e [16]byte
	k := 0
	c := packTypes[typ]<<4 | byte(length&0x0f)
	for rest := length >> 4; ; rest >>= 7 {
		if rest != 0 {
			c |= 0x80
		}
		e[k], k = c, k+1
		if rest == 0 {
			break
		}
		c = byte(rest & 0x7f)
	}
	_, err := w.Write(e[:k])
	return err
}

type countingReader struct {
	r io.Reader
	n uint64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += uint64(n)
	return n, err
}

// writePack writes the objects to w as a version 2 pack file: header,
// entries, and the trailing hash of both.
func (o *agentObjects) writePack(w io.Writer, h hash.Hash) error {
	if _, err := o.pack.Seek(0, io.SeekStart); err != nil {
		return err
	}
	mw := io.MultiWriter(w, h)
	var hdr [12]byte
	copy(hdr[:], "PACK")
	binary.BigEndian.PutUint32(hdr[4:], 2)
	binary.BigEndian.PutUint32(hdr[8:], uint32(o.Count))
	if _, err := mw.Write(hdr[:]); err != nil {
		return err
	}
	if _, err := io.Copy(mw, o.pack); err != nil {
		return err
	}
	_, err := w.Write(h.Sum(nil))
	return err
}
