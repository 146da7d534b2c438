package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/sluicerl/sluice/store"
)

// Identifiers (keys, holders, event ids, config names) follow store's one
// rule (store.CheckID): 1 to a documented number of bytes of valid UTF-8
// without control characters. A request that breaks it gets a 422
// invalid-request problem whose errors[] points at the field, before any
// store is touched.
//
// encoding/json turns invalid UTF-8 and lone UTF-16 surrogate escapes
// ("\ud800") into U+FFFD without a word, so that "\xff" and "\ud800" would
// be the same key. rawTextProblem therefore reads a JSON body's strings as
// sent, before any handler decodes it, and refuses a string that is not
// text.

// idReason returns what is wrong with id under the identifier rule with a
// bound of max bytes (to follow the field's name), or "".
func idReason(id string, max int) string {
	var ie *store.InvalidIDError
	if err := store.CheckIDMax("", id, max); errors.As(err, &ie) {
		return ie.Reason
	}
	return ""
}

// rawTextProblem reads the JSON body of r, if it has one, and returns a 422
// problem naming the first string in it that holds invalid UTF-8 or a lone
// surrogate escape, or nil. It leaves r.Body reading the same bytes (and
// the same error, such as http.MaxBytesError) for the handler.
func rawTextProblem(r *http.Request) *problem {
	if r.Body == nil || r.Body == http.NoBody || contentTypeProblem(r) != nil {
		return nil
	}
	b, err := io.ReadAll(r.Body)
	var rest io.Reader = http.NoBody
	if err != nil {
		rest = errReader{err}
	}
	r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(b), rest))
	if utf8.Valid(b) && !bytes.Contains(b, []byte(`\u`)) && !bytes.Contains(b, []byte(`\U`)) {
		return nil // the common case: nothing to look at
	}
	if !json.Valid(b) {
		return nil // the decoder says what is wrong
	}
	sc := textScan{b: b}
	path, reason := sc.scan()
	if reason == "" {
		return nil
	}
	label := strings.Join(path, ".")
	if label == "" {
		label = "request body"
	}
	fe := fieldError{Pointer: pointer(path...), kind: TypeInvalidRequest, Detail: label + " " + reason}
	return invalid([]fieldError{fe})
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// textScan walks a JSON document and finds the first string that is not
// text. It gives up, finding nothing, on malformed JSON (the decoder
// reports that) and on nesting deeper than maxScanDepth.
type textScan struct {
	b    []byte
	i    int
	path []string
	bad  string // the reason, once found
}

const maxScanDepth = 256

var errStop = errors.New("stop")

// scan returns the path and reason of the first string that is not text,
// or a nil path and "".
func (sc *textScan) scan() ([]string, string) {
	_ = sc.value(0)
	if sc.bad == "" {
		return nil, ""
	}
	return sc.path, sc.bad
}

func (sc *textScan) ws() {
	for sc.i < len(sc.b) {
		switch sc.b[sc.i] {
		case ' ', '\t', '\n', '\r':
			sc.i++
		default:
			return
		}
	}
}

// value scans one value at depth d. It returns errStop when it found a bad
// string (sc.path names it) or cannot go on.
func (sc *textScan) value(d int) error {
	if d > maxScanDepth {
		return errStop
	}
	sc.ws()
	if sc.i >= len(sc.b) {
		return errStop
	}
	switch sc.b[sc.i] {
	case '{':
		sc.i++
		for n := 0; ; n++ {
			sc.ws()
			if sc.i < len(sc.b) && sc.b[sc.i] == '}' && n == 0 {
				sc.i++
				return nil
			}
			name, err := sc.str()
			if err != nil {
				if sc.bad != "" {
					sc.bad = "has a member name that " + sc.bad
				}
				return err
			}
			sc.ws()
			if sc.i >= len(sc.b) || sc.b[sc.i] != ':' {
				return errStop
			}
			sc.i++
			sc.path = append(sc.path, name)
			if err := sc.value(d + 1); err != nil {
				return err
			}
			sc.path = sc.path[:len(sc.path)-1]
			sc.ws()
			if sc.i >= len(sc.b) {
				return errStop
			}
			if c := sc.b[sc.i]; c == '}' {
				sc.i++
				return nil
			} else if c != ',' {
				return errStop
			}
			sc.i++
		}
	case '[':
		sc.i++
		for n := 0; ; n++ {
			sc.ws()
			if sc.i < len(sc.b) && sc.b[sc.i] == ']' && n == 0 {
				sc.i++
				return nil
			}
			sc.path = append(sc.path, strconv.Itoa(n))
			if err := sc.value(d + 1); err != nil {
				return err
			}
			sc.path = sc.path[:len(sc.path)-1]
			sc.ws()
			if sc.i >= len(sc.b) {
				return errStop
			}
			if c := sc.b[sc.i]; c == ']' {
				sc.i++
				return nil
			} else if c != ',' {
				return errStop
			}
			sc.i++
		}
	case '"':
		_, err := sc.str()
		return err
	default:
		// A number, true, false or null: skip to the next delimiter.
		for sc.i < len(sc.b) {
			switch sc.b[sc.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return nil
			}
			sc.i++
		}
		return nil
	}
}

// str scans a string at sc.i and returns it decoded (as far as the path
// needs: escapes other than \uXXXX are kept as the escaped byte). It sets
// sc.bad and returns errStop for a string that is not text.
func (sc *textScan) str() (string, error) {
	if sc.i >= len(sc.b) || sc.b[sc.i] != '"' {
		return "", errStop
	}
	sc.i++
	var out []byte
	for sc.i < len(sc.b) {
		c := sc.b[sc.i]
		switch {
		case c == '"':
			sc.i++
			return string(out), nil
		case c == '\\':
			if sc.i+1 >= len(sc.b) {
				return "", errStop
			}
			e := sc.b[sc.i+1]
			if e != 'u' {
				out = append(out, unescape(e))
				sc.i += 2
				continue
			}
			r, ok := sc.hex4(sc.i + 2)
			if !ok {
				return "", errStop // malformed: the decoder says so
			}
			sc.i += 6
			if utf16.IsSurrogate(r) {
				r2, ok2 := rune(0), false
				if r < 0xdc00 && sc.i+1 < len(sc.b) && sc.b[sc.i] == '\\' && sc.b[sc.i+1] == 'u' {
					r2, ok2 = sc.hex4(sc.i + 2)
				}
				pair := utf16.DecodeRune(r, r2)
				if !ok2 || pair == utf8.RuneError {
					sc.bad = "holds a lone UTF-16 surrogate escape \\u" + strconv.FormatInt(int64(r), 16) + ", which is not text"
					return "", errStop
				}
				sc.i += 6
				r = pair
			}
			out = utf8.AppendRune(out, r)
		case c < utf8.RuneSelf:
			out = append(out, c)
			sc.i++
		default:
			r, n := utf8.DecodeRune(sc.b[sc.i:])
			if r == utf8.RuneError && n <= 1 {
				sc.bad = "is not valid UTF-8"
				return "", errStop
			}
			out = append(out, sc.b[sc.i:sc.i+n]...)
			sc.i += n
		}
	}
	return "", errStop
}

func (sc *textScan) hex4(at int) (rune, bool) {
	if at+4 > len(sc.b) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(sc.b[at:at+4]), 16, 32)
	return rune(v), err == nil
}

func unescape(e byte) byte {
	switch e {
	case 'n':
		return '\n'
	case 't':
		return '\t'
	case 'r':
		return '\r'
	case 'b':
		return '\b'
	case 'f':
		return '\f'
	}
	return e // '"', '\\', '/'
}

// paramProblem is the 422 problem for a path or query parameter (in is
// "path" or "query") that breaks the identifier rule, or nil.
func paramProblem(in, name, value string, max int) *problem {
	why := idReason(value, max)
	if why == "" {
		return nil
	}
	return invalid([]fieldError{{Pointer: "#/" + in + "/" + name, kind: TypeInvalidRequest,
		Detail: in + " parameter " + name + " " + why}})
}

// leaseIDText reports whether a lease id's JSON (raw) holds only text and
// its name, key and holder follow the identifier rule: any other id is not
// one this API issued.
func leaseIDText(raw []byte, l store.Lease) bool {
	sc := textScan{b: raw}
	if _, bad := sc.scan(); bad != "" {
		return false
	}
	return store.CheckLeaseKey(l.Name, l.Key) == nil && store.CheckHolder(l.Holder) == nil
}
