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
//   - the body is one JSON value with nothing after it.
//
// Each failure is a 400 malformed-request problem whose errors[] points at
// the offending field.

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
		for name, v := range params {
			if name != "charset" {
				why = fmt.Sprintf(", without parameters but charset=utf-8; %q has %s", truncate(ct, 64), truncate(name, 32))
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
	if p := checkTokens(data, reflect.TypeOf(v), at, want); p != nil {
		return p
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields() // checkTokens has refused them; a second guard
	if err := dec.Decode(v); err != nil {
		return decodeProblem(err, at)
	}
	return nil
}

// checkTokens walks data token by token beside t, the Go type it decodes
// into, and refuses what encoding/json lets through: a field name that is
// not one of the struct's exact names, a name given twice in one object,
// and anything after the value. Type mismatches are left to the decoder.
func checkTokens(data []byte, t reflect.Type, at []string, want string) *problem {
	if len(bytes.Trim(data, " \t\r\n")) == 0 {
		return malformed(nilIfEmpty(at), "%s is empty; want a JSON object", name(at))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if p := checkValue(dec, t, at, at, want); p != nil {
		return p
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return malformed(nilIfEmpty(at), "%s has data after the JSON object; send exactly one object", name(at))
	}
	return nil
}

// checkValue reads one value, at path at, from dec; t is the type it
// decodes into (nil when unknown: a json.RawMessage, an interface, a type
// mismatch). Syntax errors point at root, the value being decoded: the
// body or one item of it.
func checkValue(dec *json.Decoder, t reflect.Type, root, at []string, want string) *problem {
	tok, err := dec.Token()
	if err != nil {
		return decodeProblem(err, root)
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == rawMessage {
		t = nil
	}
	switch tok {
	case json.Delim('{'):
		var fields map[string]reflect.Type
		if t != nil && t.Kind() == reflect.Struct {
			fields = jsonFields(t)
		}
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return decodeProblem(err, root)
			}
			key, _ := kt.(string)
			path := append(append([]string(nil), at...), key)
			if seen[key] {
				return malformed(path, "%s is given twice; give each field once", name(path))
			}
			seen[key] = true
			var ft reflect.Type
			if fields != nil {
				var ok bool
				if ft, ok = fields[key]; !ok {
					return unknownField(path, key, fields, want)
				}
			}
			if p := checkValue(dec, ft, root, path, want); p != nil {
				return p
			}
		}
	case json.Delim('['):
		var et reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			et = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			if p := checkValue(dec, et, root, append(append([]string(nil), at...), strconv.Itoa(i)), want); p != nil {
				return p
			}
		}
	default:
		return nil // a scalar
	}
	if _, err := dec.Token(); err != nil { // the closing delimiter
		return decodeProblem(err, root)
	}
	return nil
}

var rawMessage = reflect.TypeFor[json.RawMessage]()

// jsonFields maps the JSON names of a struct's exported fields to their
// types (no embedded structs: the API's bodies have none).
func jsonFields(t reflect.Type) map[string]reflect.Type {
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

// name is how a detail names the value at path: "items.1.cost", or
// "request body".
func name(path []string) string {
	if len(path) == 0 {
		return "request body"
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
