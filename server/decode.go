package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// Every JSON body the API reads goes through readJSON and decodeJSON, so
// that every endpoint is strict in the same way:
//
//   - Content-Type is application/json, with no parameter but an optional
//     charset=utf-8 (RFC 8259 section 8.1: JSON is UTF-8); anything else is
//     a 415 naming what was sent;
//   - field names match exactly: encoding/json alone would take "Policy"
//     or "KEY" for "policy" and "key", and a field that matches no name is
//     refused as unknown;
//   - an object may not name a field twice (encoding/json keeps the last);
//   - the body is one JSON value with nothing after it;
//   - every string, member names included, is text (see textProblem).
//
// Each failure but the 415 and the 422 of a string that is not text is a
// 400 malformed-request problem whose errors[] points at the offending
// field.
//
// One scanner, walker, reads the JSON as sent for all of these checks: the
// server's middleware runs it without a Go type over every JSON body
// (rawTextProblem: strings only), decodeJSON with the body's type.

// contentTypeProblem is the 415 for a request body that is not JSON, or nil.
func contentTypeProblem(r *http.Request) *problem {
	ct := r.Header.Get("Content-Type")
	var why string
	switch mt, params, err := mime.ParseMediaType(ct); {
	case ct == "":
		why = "; the request has none"
	case err != nil || mt != contentJSON:
		why = fmt.Sprintf(", not %q", truncate(ct, 64))
	default:
		for param, v := range params {
			if param != "charset" {
				why = fmt.Sprintf(", without parameters but charset=utf-8; %q has %s", truncate(ct, 64), truncate(param, 32))
			} else if !strings.EqualFold(v, "utf-8") {
				why = fmt.Sprintf(" in UTF-8; %q names charset %s", truncate(ct, 64), truncate(v, 32))
			}
		}
	}
	if why == "" {
		return nil
	}
	return &problem{Type: typeBlank, Status: http.StatusUnsupportedMediaType, Detail: "Content-Type must be application/json" + why}
}

// readJSON reads a request body into v, a pointer to a struct of the
// endpoint's body: the Content-Type check, then decodeJSON. want lists the
// fields, for the unknown-field message.
func (s *Server) readJSON(r *http.Request, v any, want string) *problem {
	if p := contentTypeProblem(r); p != nil {
		return p
	}
	// The body is bounded by wrap's MaxBytesReader.
	data, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return s.tooLarge()
		}
		return malformed(nil, "reading the request body: %v", err)
	}
	return decodeJSON(data, v, nil, want)
}

// tooLarge is the 413 problem, naming the cap.
func (s *Server) tooLarge() *problem {
	return &problem{Type: typeBlank, Status: http.StatusRequestEntityTooLarge,
		Detail: fmt.Sprintf("request body is larger than %s, the most this server reads", formatBytes(s.maxBody))}
}

// formatBytes writes a byte count, with its binary unit when it has one:
// "4194304 bytes (4 MiB)".
func formatBytes(n int64) string {
	out := strconv.FormatInt(n, 10) + " bytes"
	for _, u := range []struct {
		size int64
		name string
	}{{1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if n >= u.size && n%u.size == 0 {
			return out + " (" + strconv.FormatInt(n/u.size, 10) + " " + u.name + ")"
		}
	}
	return out
}

// decodeJSON decodes one JSON value, data, into v strictly (see above). at
// is the pointer of data within the request body (nil: the body itself);
// want lists the fields of v, for the unknown-field message.
func decodeJSON(data []byte, v any, at []string, want string) *problem {
	if len(bytes.Trim(data, " \t\r\n")) == 0 {
		return malformed(nilIfEmpty(at), "%s is empty; want a JSON object", name(at))
	}
	if !json.Valid(data) {
		// The decoder says where: a syntax error in the first value, or
		// something after it.
		var first json.RawMessage
		if err := json.NewDecoder(bytes.NewReader(data)).Decode(&first); err != nil {
			return decodeProblem(err, at)
		}
		return malformed(nilIfEmpty(at), "%s has data after the JSON object; send exactly one object", name(at))
	}
	w := walker{data: data, root: at, want: want}
	w.path = w.buf[:0]
	if p := w.value(reflect.TypeOf(v)); p != nil {
		return p
	}
	// The walker has refused unknown fields and strings that are not text;
	// what is left is type errors.
	if err := json.Unmarshal(data, v); err != nil {
		return decodeProblem(err, at)
	}
	return nil
}

// textProblem returns the 422 invalid-request problem of the first string
// in data, valid JSON, that is not text, or nil; at is the pointer of data
// within the request body (nil: the body itself).
//
// encoding/json turns invalid UTF-8 and lone UTF-16 surrogate escapes
// ("\ud800") into U+FFFD without a word, so that "\xff" and "\ud800" would
// be the same key: the JSON has to be read as sent, before it is decoded.
func textProblem(data []byte, at []string) *problem {
	w := walker{data: data, root: at}
	w.path = w.buf[:0]
	return w.value(nil)
}

// walker walks valid JSON, beside the Go type it decodes into when there
// is one, and refuses, at the first it meets in document order, what
// encoding/json lets through: a string (a value or a member name) that is
// not text (a 422), and, in a struct, a field name that is not one of its
// exact names or a name given twice in one object (a 400). It allocates
// nothing on the way unless it finds one of those. Type mismatches are
// left to the decoder.
type walker struct {
	data []byte
	i    int
	root []string // the pointer of data in the request body
	want string
	path []segment // below root
	buf  [8]segment
}

// segment is one step of a path: an object key (raw, as in data) or an
// array index.
type segment struct {
	key     []byte
	escaped bool // key holds escapes (\n, \u0061...)
	index   int  // -1 for a key
}

// value walks one value; t is the Go type it decodes into (nil when
// unknown: a json.RawMessage, an interface, a type mismatch).
func (w *walker) value(t reflect.Type) *problem {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == rawMessage {
		t = nil
	}
	w.space()
	switch w.data[w.i] {
	case '{':
		return w.object(t)
	case '[':
		var et reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			et = t.Elem()
		}
		w.i++
		for n := 0; ; n++ {
			w.space()
			if w.data[w.i] == ']' {
				w.i++
				return nil
			}
			w.path = append(w.path, segment{index: n})
			if p := w.value(et); p != nil {
				return p
			}
			w.path = w.path[:len(w.path)-1]
			w.space()
			if w.data[w.i] == ',' {
				w.i++
			}
		}
	case '"':
		if _, _, why := w.str(); why != "" {
			return notText(w.where(), why)
		}
	default: // a number, true, false or null
		for w.i < len(w.data) && !isDelim(w.data[w.i]) {
			w.i++
		}
	}
	return nil
}

func (w *walker) object(t reflect.Type) *problem {
	var fields map[string]reflect.Type
	if t != nil && t.Kind() == reflect.Struct {
		fields = fieldsOf(t)
	}
	var (
		small [8][]byte // the keys seen, unescaped
		seen  = small[:0]
		many  map[string]bool // past 8 keys
	)
	w.i++
	for {
		w.space()
		if w.data[w.i] == '}' {
			w.i++
			return nil
		}
		raw, escaped, why := w.str()
		if why != "" {
			return notText(w.where(), "has a member name that "+why)
		}
		key := raw
		if escaped {
			key = []byte(unquote(raw))
		}
		w.path = append(w.path, segment{key: raw, escaped: escaped, index: -1})
		dup := false
		if many != nil {
			dup = many[string(key)]
			many[string(key)] = true
		} else {
			for _, k := range seen {
				dup = dup || bytes.Equal(k, key)
			}
			if seen = append(seen, key); len(seen) == len(small) {
				many = make(map[string]bool, 2*len(small))
				for _, k := range seen {
					many[string(k)] = true
				}
			}
		}
		if dup {
			path := w.where()
			return malformed(path, "%s is given twice; give each field once", name(path))
		}
		var ft reflect.Type
		if fields != nil {
			var ok bool
			if ft, ok = fields[string(key)]; !ok {
				return unknownField(w.where(), string(key), fields, w.want)
			}
		}
		w.space()
		w.i++ // ':'
		if p := w.value(ft); p != nil {
			return p
		}
		w.path = w.path[:len(w.path)-1]
		w.space()
		if w.data[w.i] == ',' {
			w.i++
		}
	}
}

// str reads a string at w.i and returns its raw contents, whether they
// hold escapes, and, for a string that is not text, why (textReason).
func (w *walker) str() (raw []byte, escaped bool, why string) {
	w.i++ // '"'
	start, high := w.i, false
	for w.data[w.i] != '"' {
		switch c := w.data[w.i]; {
		case c == '\\':
			escaped = true
			w.i++
		case c >= utf8.RuneSelf:
			high = true
		}
		w.i++
	}
	w.i++
	raw = w.data[start : w.i-1]
	if high || escaped {
		why = textReason(raw)
	}
	return raw, escaped, why
}

// textReason says why the raw contents of a valid JSON string are not text
// (bytes that are not UTF-8, or a \u escape of a UTF-16 surrogate without
// its pair), at the first such spot, or returns "".
func textReason(raw []byte) string {
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '\\' && raw[i+1] == 'u':
			r := hex4(raw[i+2:])
			i += 6
			if !utf16.IsSurrogate(r) {
				continue
			}
			if r < 0xdc00 && i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
				if utf16.DecodeRune(r, hex4(raw[i+2:])) != utf8.RuneError {
					i += 6
					continue
				}
			}
			return "holds a lone UTF-16 surrogate escape \\u" + strconv.FormatInt(int64(r), 16) + ", which is not text"
		case c == '\\':
			i += 2
		case c < utf8.RuneSelf:
			i++
		default:
			r, n := utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && n <= 1 {
				return "is not valid UTF-8"
			}
			i += n
		}
	}
	return ""
}

// hex4 reads the four hex digits of a \u escape in valid JSON.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// notText is the 422 problem of a string at path that is not text.
func notText(path []string, why string) *problem {
	return invalid([]fieldError{{Pointer: pointer(path...), kind: TypeInvalidRequest, Detail: name(path) + " " + why}})
}

func (w *walker) space() {
	for w.i < len(w.data) && isSpace(w.data[w.i]) {
		w.i++
	}
}

// where is the path of the value being walked, for a problem.
func (w *walker) where() []string {
	out := append([]string(nil), w.root...)
	for _, s := range w.path {
		switch {
		case s.index >= 0:
			out = append(out, strconv.Itoa(s.index))
		case s.escaped:
			out = append(out, unquote(s.key))
		default:
			out = append(out, string(s.key))
		}
	}
	return out
}

// unquote decodes the raw contents of a valid JSON string.
func unquote(raw []byte) string {
	var s string
	_ = json.Unmarshal(append(append([]byte{'"'}, raw...), '"'), &s)
	return s
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func isDelim(c byte) bool { return c == ',' || c == ']' || c == '}' || isSpace(c) }

var rawMessage = reflect.TypeFor[json.RawMessage]()

// fieldCache holds fieldsOf's answers: reflect.Type -> map[string]reflect.Type.
var fieldCache sync.Map

// fieldsOf maps the JSON names of a struct's exported fields to their types
// (no embedded structs: the API's bodies have none).
func fieldsOf(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	out := make(map[string]reflect.Type, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		n, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch n {
		case "-":
			continue
		case "":
			n = f.Name
		}
		out[n] = f.Type
	}
	fieldCache.Store(t, out)
	return out
}

// unknownField is the problem of a field name that is not the struct's;
// when it differs only in case, it says which name was meant.
func unknownField(path []string, key string, fields map[string]reflect.Type, want string) *problem {
	for n := range fields {
		if strings.EqualFold(n, key) {
			return malformed(path, "unknown field %q: field names are case-sensitive; did you mean %q?", truncate(key, 64), n)
		}
	}
	return malformed(path, "unknown field %q (want %s)", truncate(key, 64), want)
}

// name is how a detail names the value at path: "items.1.cost", "request
// body", or for a query parameter (#/query/key) "query parameter key".
func name(path []string) string {
	switch {
	case len(path) == 0:
		return "request body"
	case len(path) == 2 && path[0] == "query":
		return "query parameter " + path[1]
	}
	return strings.Join(path, ".")
}

// malformed is a 400 malformed-request problem; with a path, its errors[]
// points there.
func malformed(path []string, format string, args ...any) *problem {
	detail := fmt.Sprintf(format, args...)
	p := &problem{Type: TypeMalformedRequest, Status: http.StatusBadRequest, Detail: detail}
	if path != nil {
		p.Errors = []fieldError{{Pointer: pointer(path...), Detail: detail, kind: TypeMalformedRequest}}
	}
	return p
}

// decodeProblem turns an encoding/json error into a problem. at is the
// pointer of the value being decoded.
func decodeProblem(err error, at []string) *problem {
	var (
		se  *json.SyntaxError
		ute *json.UnmarshalTypeError
	)
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return malformed(nilIfEmpty(at), "%s ends in the middle of a JSON value", name(at))
	case errors.As(err, &se):
		return malformed(nilIfEmpty(at), "malformed JSON at byte %d: %s", se.Offset, strings.TrimPrefix(se.Error(), "json: "))
	case errors.As(err, &ute):
		path := append([]string(nil), at...)
		if ute.Field != "" {
			path = append(path, strings.Split(ute.Field, ".")...)
		}
		return malformed(nilIfEmpty(path), "%s must be %s, got a JSON %s", name(path), jsonKind(ute.Type.Kind().String()), ute.Value)
	default:
		return malformed(nilIfEmpty(at), "%s is not valid JSON: %s", name(at), strings.TrimPrefix(err.Error(), "json: "))
	}
}

func nilIfEmpty(path []string) []string {
	if len(path) == 0 {
		return nil
	}
	return path
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "slice", "array":
		return "an array"
	case "struct", "map":
		return "an object"
	case "bool":
		return "true or false"
	}
	return "a number"
}
