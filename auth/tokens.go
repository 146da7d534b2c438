package auth

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
)

// TokenPrefix starts every token NewToken mints, so that a token is easy
// to recognise (and to scan for) in logs and repositories.
const TokenPrefix = "sluice_"

// MaxNameLen bounds a token's name.
const MaxNameLen = 64

// Errors of Authenticate. A server answers the first three 401 with a
// WWW-Authenticate challenge, and ErrForbidden 403.
var (
	// ErrNoToken: the request carries no credentials.
	ErrNoToken = errors.New("auth: no bearer token")
	// ErrMalformed: the Authorization value is not "Bearer <token>".
	ErrMalformed = errors.New("auth: the Authorization header is not \"Bearer <token>\"")
	// ErrUnknownToken: no configured token has this one's hash (a wrong,
	// revoked or mistyped token).
	ErrUnknownToken = errors.New("auth: unknown token")
	// ErrForbidden: the token is valid but lacks the route's scope.
	ErrForbidden = errors.New("auth: the token lacks the scope this needs")
)

// Principal is an authenticated caller: its token's name and scopes.
type Principal struct {
	Name   string
	Scopes Scope
}

// entry is one configured token.
type entry struct {
	name   string
	scopes Scope
	hash   [sha256.Size]byte
}

// Tokens is an immutable set of hashed tokens. It is safe for concurrent
// use. The zero value (and nil) holds no token: every token is unknown.
type Tokens struct {
	entries []entry
}

// Len is the number of tokens in t.
func (t *Tokens) Len() int {
	if t == nil {
		return 0
	}
	return len(t.entries)
}

// Hash is the SHA-256 of a token, as the hex a token file holds.
func Hash(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// NewToken mints a token: TokenPrefix and 256 bits from crypto/rand.
func NewToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// Line is the token-file line for a token named name with scopes.
func Line(name string, scopes Scope, token string) string {
	return name + " " + scopes.String() + " sha256:" + Hash(token)
}

// Spec is one token as configured: a name, its scopes and the hex SHA-256
// of the token.
type Spec struct {
	Name   string
	Scopes Scope
	SHA256 string
}

// New checks specs and returns them as a set: names valid and unique,
// scopes not empty, hashes 64 hex digits and unique.
func New(specs []Spec) (*Tokens, error) {
	t := &Tokens{entries: make([]entry, 0, len(specs))}
	names, hashes := map[string]bool{}, map[[sha256.Size]byte]string{}
	for _, s := range specs {
		e, err := s.entry()
		if err != nil {
			return nil, err
		}
		if names[e.name] {
			return nil, fmt.Errorf("auth: token %q: the name is used twice", e.name)
		}
		if other, dup := hashes[e.hash]; dup {
			return nil, fmt.Errorf("auth: token %q: same hash as token %q (one token under two names)", e.name, other)
		}
		names[e.name], hashes[e.hash] = true, e.name
		t.entries = append(t.entries, e)
	}
	return t, nil
}

func (s Spec) entry() (entry, error) {
	if err := checkName(s.Name); err != nil {
		return entry{}, err
	}
	if s.Scopes == 0 || s.Scopes&^All != 0 {
		return entry{}, fmt.Errorf("auth: token %q: scopes must be a non-empty set of read, take, lease, slots, jobs, admin", s.Name)
	}
	h := strings.TrimPrefix(strings.ToLower(s.SHA256), "sha256:")
	raw, err := hex.DecodeString(h)
	if err != nil || len(raw) != sha256.Size {
		why := "want 64 hex digits (sluice token create prints them)"
		if strings.HasPrefix(h, TokenPrefix) {
			why = "this is a token, not its hash: store only the hash (sluice token hash prints it)"
		}
		return entry{}, fmt.Errorf("auth: token %q: bad sha256 %q: %s", s.Name, truncate(s.SHA256, 12), why)
	}
	e := entry{name: s.Name, scopes: s.Scopes}
	copy(e.hash[:], raw)
	return e, nil
}

func checkName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("auth: token name %q: want 1 to %d characters", truncate(name, MaxNameLen), MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("auth: token name %q: only letters, digits, '.', '_' and '-' are allowed", truncate(name, MaxNameLen))
		}
	}
	return nil
}

// Lookup finds the principal of a token. It hashes token and compares the
// hash with every configured one in constant time, without stopping at a
// match.
func (t *Tokens) Lookup(token string) (Principal, error) {
	if t == nil || token == "" {
		return Principal{}, ErrUnknownToken
	}
	// Hash from a stack buffer: tokens NewToken mints (50 bytes) then
	// cost no allocation.
	var buf [64]byte
	h := sha256.Sum256(append(buf[:0], token...))
	found := -1
	for i := range t.entries {
		eq := subtle.ConstantTimeCompare(h[:], t.entries[i].hash[:])
		found = subtle.ConstantTimeSelect(eq, i, found)
	}
	if found < 0 {
		return Principal{}, ErrUnknownToken
	}
	e := &t.entries[found]
	return Principal{Name: e.name, Scopes: e.scopes}, nil
}

// Authenticate reads an Authorization header value ("Bearer <token>",
// the scheme in any case) and returns its principal when it holds need.
// Errors: ErrNoToken, ErrMalformed, ErrUnknownToken (401) and
// ErrForbidden (403, with the principal).
func (t *Tokens) Authenticate(authorization string, need Scope) (Principal, error) {
	if authorization == "" {
		return Principal{}, ErrNoToken
	}
	scheme, token, ok := strings.Cut(authorization, " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" || strings.ContainsAny(token, " \t") {
		return Principal{}, ErrMalformed
	}
	p, err := t.Lookup(token)
	if err != nil {
		return Principal{}, err
	}
	if !p.Scopes.Has(need) {
		return p, ErrForbidden
	}
	return p, nil
}

// Keyring holds the current Tokens and replaces them atomically: a
// request authenticates against the old set or the new one, never a mix.
// It is safe for concurrent use. The zero value holds no token (every
// token is unknown).
type Keyring struct {
	cur atomic.Pointer[Tokens]
}

// NewKeyring returns a Keyring holding t.
func NewKeyring(t *Tokens) *Keyring {
	k := &Keyring{}
	k.cur.Store(t)
	return k
}

// Tokens returns the current set.
func (k *Keyring) Tokens() *Tokens { return k.cur.Load() }

// Store makes t the current set.
func (k *Keyring) Store(t *Tokens) { k.cur.Store(t) }

// Authenticate is Tokens.Authenticate on the current set.
func (k *Keyring) Authenticate(authorization string, need Scope) (Principal, error) {
	return k.cur.Load().Authenticate(authorization, need)
}

// maxFileSize bounds a token file (1 MiB).
const maxFileSize = 1 << 20

// LoadFile reads a token file (see ParseFile).
func LoadFile(path string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("auth: token file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("auth: token file %s: %w", path, err)
	}
	return ParseFile(path, data)
}

// ParseFile parses a token file: one token per line, "NAME SCOPES
// sha256:HEX" separated by spaces or tabs; blank lines and lines starting
// with '#' are ignored. name is used in errors, which name the line. An
// empty file is an empty set (every token refused).
func ParseFile(name string, data []byte) (*Tokens, error) {
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("auth: %s: file is larger than %d bytes", name, maxFileSize)
	}
	var specs []Spec
	lines := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxFileSize)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("auth: %s:%d: want NAME SCOPES sha256:HEX, got %d fields", name, n, len(f))
		}
		scopes, err := ParseScopes(f[1])
		if err != nil {
			return nil, fmt.Errorf("auth: %s:%d: %s", name, n, strings.TrimPrefix(err.Error(), "auth: "))
		}
		if !strings.HasPrefix(f[2], "sha256:") {
			return nil, fmt.Errorf("auth: %s:%d: the hash must start with \"sha256:\"", name, n)
		}
		spec := Spec{Name: f[0], Scopes: scopes, SHA256: f[2]}
		if _, err := spec.entry(); err != nil {
			return nil, fmt.Errorf("auth: %s:%d: %s", name, n, strings.TrimPrefix(err.Error(), "auth: "))
		}
		if first, dup := lines[f[0]]; dup {
			return nil, fmt.Errorf("auth: %s:%d: token name %q is used twice (first at line %d)", name, n, f[0], first)
		}
		lines[f[0]] = n
		specs = append(specs, spec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("auth: %s: %w", name, err)
	}
	t, err := New(specs)
	if err != nil {
		return nil, fmt.Errorf("auth: %s: %s", name, strings.TrimPrefix(err.Error(), "auth: "))
	}
	return t, nil
}

// Merge returns one set holding every token of sets; a name or a hash in
// two of them is an error.
func Merge(sets ...*Tokens) (*Tokens, error) {
	var specs []Spec
	for _, t := range sets {
		if t == nil {
			continue
		}
		for _, e := range t.entries {
			specs = append(specs, Spec{Name: e.name, Scopes: e.scopes, SHA256: hex.EncodeToString(e.hash[:])})
		}
	}
	return New(specs)
}
