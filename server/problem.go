package server

import (
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"
)

// Problem types (RFC 9457) of the errors the API returns. Errors that the
// status code says everything about (404, 405, 413, 415, 500) use
// "about:blank", whose title is the status text.
const (
	typeBlank = "about:blank"
	// TypeMalformedRequest: 400, the body is not the JSON the endpoint
	// reads (syntax, trailing data, an unknown field, a wrong JSON type).
	TypeMalformedRequest = "urn:sluice:problem:malformed-request"
	// TypeInvalidRequest: 422, the JSON is well formed but a field is
	// wrong (empty key or policy, a negative or too large cost, too many
	// items); errors[] points at each one.
	TypeInvalidRequest = "urn:sluice:problem:invalid-request"
	// TypeUnknownPolicy: 422, a policy the server does not hold.
	TypeUnknownPolicy = "urn:sluice:problem:unknown-policy"
	// TypeCostExceedsLimit: 422, a cost above what the policy admits in
	// one request (its burst, or its window's limit). Retrying never helps.
	TypeCostExceedsLimit = "urn:sluice:problem:cost-exceeds-limit"
	// TypeStoreUnavailable: 503, the rate store could not decide.
	TypeStoreUnavailable = "urn:sluice:problem:store-unavailable"
	// TypePolicyRemoved: 404, a policy that an earlier configuration held
	// and a reload removed (a never-known policy is 422 unknown-policy).
	TypePolicyRemoved = "urn:sluice:problem:policy-removed"
	// TypeUnauthorized: 401, no token, or one the server does not know
	// (with a WWW-Authenticate: Bearer challenge).
	TypeUnauthorized = "urn:sluice:problem:unauthorized"
	// TypeForbidden: 403, the token lacks the route's scope, or the lease
	// was acquired with another token.
	TypeForbidden = "urn:sluice:problem:forbidden"
	// TypeInvalidConfig: 422, POST /v1/admin/reload found the
	// configuration invalid; the old one stays in force.
	TypeInvalidConfig = "urn:sluice:problem:invalid-config"
	// TypeIdempotencyKeyReused: 422, an Idempotency-Key sent again with
	// another request body.
	TypeIdempotencyKeyReused = "urn:sluice:problem:idempotency-key-reused"
	// TypeIdempotencyInFlight: 409, the first request with this
	// Idempotency-Key has not finished; retry after Retry-After.
	TypeIdempotencyInFlight = "urn:sluice:problem:idempotency-in-flight"
)

// problem is an RFC 9457 problem details object.
type problem struct {
	Type   string       `json:"type"`
	Title  string       `json:"title"`
	Status int          `json:"status"`
	Detail string       `json:"detail,omitempty"`
	Errors []fieldError `json:"errors,omitempty"`
}

// fieldError names one wrong field by a JSON Pointer in URI fragment form
// (RFC 6901 section 6), e.g. "#/items/2/cost".
type fieldError struct {
	Pointer string `json:"pointer"`
	Detail  string `json:"detail"`
	kind    string // the problem type this error alone would have
}

// fieldErrs collects the field errors of one request. add is the one way
// the server words them: the field's dotted path, then what is wrong with
// it ("items.2.cost must not be negative"), with a pointer to the field.
type fieldErrs []fieldError

func (f *fieldErrs) add(kind string, path []string, format string, args ...any) {
	*f = append(*f, fieldError{Pointer: pointer(path...), kind: kind,
		Detail: name(path) + " " + fmt.Sprintf(format, args...)})
}

func writeProblem(w http.ResponseWriter, p *problem) {
	if p.Status == http.StatusUnsupportedMediaType {
		// Every body the API reads is JSON (RFC 9110 section 15.5.16).
		w.Header().Set("Accept-Post", contentJSON)
	}
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	writeJSON(w, p.Status, contentProblem, p)
}

// pointer builds a URI-fragment JSON Pointer from reference tokens.
func pointer(tokens ...string) string {
	var b strings.Builder
	b.WriteByte('#')
	for _, t := range tokens {
		b.WriteByte('/')
		t = strings.ReplaceAll(t, "~", "~0")
		t = strings.ReplaceAll(t, "/", "~1")
		for i := 0; i < len(t); i++ {
			c := t[i]
			if fragmentSafe(c) {
				b.WriteByte(c)
			} else {
				const hex = "0123456789ABCDEF"
				b.WriteByte('%')
				b.WriteByte(hex[c>>4])
				b.WriteByte(hex[c&15])
			}
		}
	}
	return b.String()
}

// fragmentSafe reports whether c may appear unescaped in a URI fragment
// (RFC 3986 pchar / "/" / "?", less '%').
func fragmentSafe(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("-._~!$&'()*+,;=:@/?", c) >= 0
}

// truncate shortens client-supplied text echoed in a detail.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
