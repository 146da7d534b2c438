package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"
)

// FuzzDecodeJSON checks the strict decoder against encoding/json's own
// token stream: it never panics; it accepts a body exactly when the body
// is one valid JSON value that decodes into a take body, names only the
// take body's fields (exact case, at the top level) and no key twice in
// any object, and every string in it is text (decoding it yields no U+FFFD
// that the body did not spell).
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{
		`{"policy":"api","key":"k","cost":1}`, `{"items":[{"policy":"a","key":"b"}]}`,
		`{"Policy":"api"}`, `{"key":"a","key":"b"}`, `{"cost":{"a":1,"a":2}}`, `{"k\u0065y":"a","key":"b"}`,
		`{"cost":[1,{"x":[{},{"y":1,"y":2}]}]}`, `{} {}`, `{"policy":`, ` `, `[]`, `"x"`,
		`{"cost":{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"a":10}}`,
		"{\"key\":\"\xff\"}", `{"key":"\ud800"}`, `{"items":[{"\udc00":1}]}`, `{"key":"\ud83d\ude00\ufffd"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var body takeBody
		p := decodeJSON(data, &body, nil, "policy, key and cost, or items")
		want := referenceOK(data)
		if (p == nil) != want {
			detail := "accepted"
			if p != nil {
				detail = p.Detail
			}
			t.Fatalf("decodeJSON(%q): %s; the reference says ok=%v", data, detail, want)
		}
	})
}

// referenceOK is decodeJSON's contract, checked the slow way.
func referenceOK(data []byte) bool {
	var v takeBody
	if json.Unmarshal(data, &v) != nil {
		return false
	}
	var all any
	if json.Unmarshal(data, &all) != nil {
		return false
	}
	spelled := bytes.Count(data, []byte("\xef\xbf\xbd")) + bytes.Count(bytes.ToLower(data), []byte(`\ufffd`))
	if countReplacement(all) > spelled {
		return false // a string that is not text
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	fields := map[string]bool{"policy": true, "key": true, "cost": true, "items": true}
	// A stack of open containers: the keys seen in each object (nil for an
	// array), and whether the next string token is a key.
	type frame struct {
		keys  map[string]bool
		isObj bool
	}
	var stack []frame
	expectKey := false
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return true
		}
		if err != nil {
			return false
		}
		if expectKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				expectKey = len(stack) > 0 && stack[len(stack)-1].isObj
				continue
			}
			k := tok.(string)
			top := stack[len(stack)-1]
			if top.keys[k] {
				return false
			}
			top.keys[k] = true
			if len(stack) == 1 && !fields[k] {
				return false
			}
			expectKey = false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{keys: map[string]bool{}, isObj: true})
			expectKey = true
			continue
		case json.Delim('['):
			stack = append(stack, frame{})
			continue
		case json.Delim(']'), json.Delim('}'):
			stack = stack[:len(stack)-1]
		}
		expectKey = len(stack) > 0 && stack[len(stack)-1].isObj
	}
}
