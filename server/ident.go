package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"unicode/utf8"

	"github.com/sluicerl/sluice/store"
)

// Identifiers (keys, holders, event ids, config names) follow store's one
// rule (store.CheckID): 1 to a documented number of bytes of valid UTF-8
// without control characters. A request that breaks it gets a 422
// invalid-request problem whose errors[] points at the field, before any
// store is touched.
//
// Strings that are not text never reach a decoder, which would turn them
// into U+FFFD: rawTextProblem reads a JSON body's strings as sent, before
// any handler decodes it, with the scanner that decodes every body
// (decode.go, textProblem).

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
	if utf8.Valid(b) && !bytes.Contains(b, []byte(`\u`)) {
		return nil // the common case: nothing to look at
	}
	if !json.Valid(b) {
		return nil // the decoder says what is wrong
	}
	return textProblem(b, nil)
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

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
