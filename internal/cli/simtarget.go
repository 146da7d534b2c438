package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/template"
)

// targetFlags say what `sluice sim --target` sends: the method, a body
// (a Go template, literal or from a file), headers, and a per-request
// cost or weight put in a header, a query parameter or a JSON body field,
// so that it can drive a GraphQL or weighted API (issue 18).
type targetFlags struct {
	method  string
	body    string
	headers []string
	cost    int64
	costIn  string
}

func (t *targetFlags) register(cmd interface {
	StringVar(*string, string, string, string)
	StringArrayVar(*[]string, string, []string, string)
	Int64Var(*int64, string, int64, string)
}) {
	cmd.StringVar(&t.method, "method", http.MethodGet, "--target: the requests' method")
	cmd.StringVar(&t.body, "body", "", "--target: the requests' body, a Go template of .Worker, .Seq and .Cost; @FILE reads it from FILE")
	cmd.StringArrayVar(&t.headers, "header", nil, "--target: a request header 'Name: value' (repeatable)")
	cmd.Int64Var(&t.cost, "cost", 0, "--target: every request's cost or weight, sent where --cost-in says (0: none)")
	cmd.StringVar(&t.costIn, "cost-in", "", "--target: where --cost goes: header:NAME, query:NAME or body:FIELD (a dotted path into the JSON body)")
}

// bodyVars are the fields a --body template sees.
type bodyVars struct {
	Worker int
	Seq    int64
	Cost   int64
}

// requester builds the run's requests to target; it checks every flag, and
// builds a first request, before the run starts.
func (t *targetFlags) requester(target string) (func(context.Context, int, int64) (*http.Request, error), error) {
	method := strings.ToUpper(strings.TrimSpace(t.method))
	if method == "" || strings.ContainsFunc(method, func(r rune) bool { return r < 'A' || r > 'Z' }) {
		return nil, usagef("--method %q: want an HTTP method such as GET or POST", t.method)
	}
	hdr := http.Header{}
	for _, h := range t.headers {
		name, value, ok := strings.Cut(h, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.ContainsAny(name, " \t\r\n") {
			return nil, usagef("--header %q: want 'Name: value'", h)
		}
		if strings.ContainsAny(value, "\r\n") {
			return nil, usagef("--header %q: a value cannot span lines", h)
		}
		hdr.Add(textproto.CanonicalMIMEHeaderKey(name), strings.TrimSpace(value))
	}
	src := t.body
	if path, ok := strings.CutPrefix(src, "@"); ok {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, usagef("--body @%s: %v", path, err)
		}
		src = string(b)
	}
	var tmpl *template.Template
	if src != "" {
		var err error
		if tmpl, err = template.New("body").Option("missingkey=error").Parse(src); err != nil {
			return nil, usagef("--body: %v", err)
		}
	}
	if t.cost < 0 {
		return nil, usagef("--cost must be >= 0, got %d", t.cost)
	}
	where, name, _ := strings.Cut(t.costIn, ":")
	switch {
	case t.costIn == "" && t.cost > 0:
		return nil, usagef("--cost needs --cost-in header:NAME, query:NAME or body:FIELD")
	case t.costIn == "":
	case name == "" || (where != "header" && where != "query" && where != "body"):
		return nil, usagef("--cost-in %q: want header:NAME, query:NAME or body:FIELD", t.costIn)
	case where == "body" && tmpl == nil:
		return nil, usagef("--cost-in %s needs a JSON --body to put the cost in", t.costIn)
	}
	build := func(ctx context.Context, w int, seq int64) (*http.Request, error) {
		var body []byte
		if tmpl != nil {
			var b bytes.Buffer
			if err := tmpl.Execute(&b, bodyVars{Worker: w, Seq: seq, Cost: t.cost}); err != nil {
				return nil, fmt.Errorf("--body: %w", err)
			}
			body = b.Bytes()
		}
		u := target
		cost := strconv.FormatInt(t.cost, 10)
		switch where {
		case "query":
			pu, err := url.Parse(target)
			if err != nil {
				return nil, err
			}
			q := pu.Query()
			q.Set(name, cost)
			pu.RawQuery = q.Encode()
			u = pu.String()
		case "body":
			var err error
			if body, err = setJSONField(body, name, t.cost); err != nil {
				return nil, fmt.Errorf("--cost-in %s: %w", t.costIn, err)
			}
		}
		var req *http.Request
		var err error
		if body != nil {
			req, err = http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
		} else {
			req, err = http.NewRequestWithContext(ctx, method, u, nil)
		}
		if err != nil {
			return nil, err
		}
		req.Header = hdr.Clone()
		if body != nil && req.Header.Get("Content-Type") == "" && json.Valid(body) {
			req.Header.Set("Content-Type", "application/json")
		}
		if where == "header" {
			req.Header.Set(name, cost)
		}
		return req, nil
	}
	if _, err := build(context.Background(), 0, 0); err != nil {
		return nil, usageError{err}
	}
	return build, nil
}

// setJSONField sets the field at a dotted path of a JSON object body to v,
// creating the objects on the way.
func setJSONField(body []byte, path string, v int64) ([]byte, error) {
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil || doc == nil {
		return nil, fmt.Errorf("the body is not a JSON object")
	}
	parts := strings.Split(path, ".")
	m := doc
	for i, p := range parts {
		if p == "" {
			return nil, fmt.Errorf("empty field name in %q", path)
		}
		if i == len(parts)-1 {
			m[p] = v
			break
		}
		next, ok := m[p].(map[string]any)
		if !ok {
			if _, exists := m[p]; exists {
				return nil, fmt.Errorf("%q is not an object", strings.Join(parts[:i+1], "."))
			}
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	return json.Marshal(doc)
}
