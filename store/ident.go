package store

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// Identifiers. Every key, limit name, holder, event id and config name that
// reaches a store follows one rule, checked by CheckID before any backend is
// touched: 1 to a documented number of bytes of valid UTF-8 with no control
// character (C0 U+0000–U+001F, DEL U+007F, C1 U+0080–U+009F; NUL among
// them, which PostgreSQL text cannot hold). The bounds, in bytes:
//
//	rate and lease keys, limit names     MaxIDBytes (512)
//	lease holders                        MaxHolderLen (256)
//	slot event ids                       MaxEventIDLen (256)
//	slot config names                    MaxConfigNameLen (128)
//
// A value that breaks the rule is the caller's mistake, never a store
// outage: the error is an *InvalidIDError, which matches ErrInvalidID (and,
// when the value is empty, ErrEmptyKey).

// MaxIDBytes is the longest rate key, lease key or limit name, in bytes.
// It is far below what any backend can index (a PostgreSQL btree entry
// holds about 2700 bytes) and above any key made of a few ids and a route.
const MaxIDBytes = 512

// ErrInvalidID: an identifier that breaks the rule above. The error is an
// *InvalidIDError naming the field and the reason.
var ErrInvalidID = errors.New("store: invalid identifier")

// InvalidIDError says which identifier is invalid and why. It matches
// ErrInvalidID with errors.Is, and ErrEmptyKey too when the identifier is
// empty. It is a plain value, safe to share once built.
type InvalidIDError struct {
	// Field names the identifier: "key", "holder", "items[3].key".
	Field string
	// Reason says what is wrong with it, without repeating the value
	// (which may be huge or unprintable).
	Reason string

	empty bool
	kind  error // a sentinel of the operation (ErrInvalidLease, ...), or nil
}

func (e *InvalidIDError) Error() string {
	k := e.kind
	if k == nil {
		k = ErrInvalidID
	}
	return k.Error() + ": " + e.Field + " " + e.Reason
}

// Is reports whether target is ErrInvalidID, ErrEmptyKey for an empty
// identifier, or the sentinel of the operation that checked it
// (ErrInvalidLease for a holder, ErrInvalidEvent for an event id,
// ErrInvalidSlotConfig for a config name).
func (e *InvalidIDError) Is(target error) bool {
	return target == ErrInvalidID || (e.empty && target == ErrEmptyKey) || (e.kind != nil && target == e.kind)
}

// CheckID checks s against the identifier rule with the MaxIDBytes bound;
// field names it in the error. It does not allocate when s is valid.
func CheckID(field, s string) error { return CheckIDMax(field, s, MaxIDBytes) }

// CheckIDMax is CheckID with a bound of max bytes.
func CheckIDMax(field, s string, max int) error {
	if s == "" || len(s) > max {
		return badID(field, s, max)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			return checkIDSlow(field, s, i)
		}
	}
	return nil
}

// checkIDSlow checks s from byte i on, the first byte that is not
// printable ASCII.
func checkIDSlow(field, s string, i int) error {
	for i < len(s) {
		c := s[i]
		if c >= 0x20 && c < 0x7f {
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			return &InvalidIDError{Field: field, Reason: fmt.Sprintf("is not valid UTF-8 (byte %d)", i)}
		case IsControl(r):
			return &InvalidIDError{Field: field, Reason: fmt.Sprintf("contains control character %U at byte %d", r, i)}
		}
		i += n
	}
	return nil
}

func badID(field, s string, max int) error {
	if s == "" {
		return &InvalidIDError{Field: field, Reason: "is empty", empty: true}
	}
	return &InvalidIDError{Field: field, Reason: fmt.Sprintf("is %d bytes, longer than %d", len(s), max)}
}

// IsControl reports whether r is a control character the identifier rule
// refuses: C0, DEL or C1.
func IsControl(r rune) bool {
	return r < 0x20 || (r >= 0x7f && r <= 0x9f)
}

// checkIDAs is CheckIDMax whose error also matches kind and says it first.
func checkIDAs(kind error, field, s string, max int) error {
	err := CheckIDMax(field, s, max)
	if e, ok := err.(*InvalidIDError); ok {
		e.kind = kind
	}
	return err
}

// CheckKey checks a rate or lease key: CheckID("key", key).
func CheckKey(key string) error { return CheckID("key", key) }
