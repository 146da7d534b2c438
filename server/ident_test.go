package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRawTextProblem(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body, pointer, detail string
	}{
		{"plain", `{"key":"k"}`, "", ""},
		{"valid escapes", `{"key":"\u00e9\ud83d\ude00\n\"\\\/"}`, "", ""},
		{"literal replacement char", "{\"key\":\"\xef\xbf\xbd\\ufffd\"}", "", ""},
		{"raw invalid byte", "{\"key\":\"a\xffb\"}", "#/key", "key is not valid UTF-8"},
		{"raw encoded surrogate", "{\"key\":\"\xed\xa0\x80\"}", "#/key", "key is not valid UTF-8"},
		{"lone high surrogate", `{"key":"a\ud800b"}`, "#/key", `key holds a lone UTF-16 surrogate escape \ud800, which is not text`},
		{"high then not low", `{"key":"\ud800\u0041"}`, "#/key", `key holds a lone UTF-16 surrogate escape \ud800, which is not text`},
		{"lone low surrogate", `{"key":"\uDC00"}`, "#/key", `key holds a lone UTF-16 surrogate escape \udc00, which is not text`},
		{"in an array item", `{"items":[{"key":"ok"},{"policy":"p","key":"\ud800"}]}`, "#/items/1/key", "items.1.key holds"},
		{"nested arrays", `{"a":[[1,2],[3,"\udfff"]]}`, "#/a/1/1", "a.1.1 holds"},
		{"member name", "{\"k\xff\":1}", "#", "request body has a member name that is not valid UTF-8"},
		{"top-level string", "\"\xff\"", "#", "request body is not valid UTF-8"},
		{"escaped slash in name", `{"a/b":"\ud800"}`, "#/a~1b", "a/b holds"},
		{"malformed json is the decoder's", "{\"key\":\"\xff", "", ""},
		{"syntax before the bad string", "{\"key\" \"\xff\"}", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(http.MethodPost, "/v1/take", strings.NewReader(tc.body))
			r.Header.Set("Content-Type", "application/json")
			p := rawTextProblem(r)
			// The handler still reads the whole body.
			rest := new(bytes.Buffer)
			_, err := rest.ReadFrom(r.Body)
			require.NoError(t, err)
			require.Equal(t, tc.body, rest.String())
			if tc.pointer == "" {
				require.Nil(t, p)
				return
			}
			require.NotNil(t, p)
			require.Equal(t, http.StatusUnprocessableEntity, p.Status)
			require.Equal(t, TypeInvalidRequest, p.Type)
			require.Len(t, p.Errors, 1)
			require.Equal(t, tc.pointer, p.Errors[0].Pointer)
			require.Contains(t, p.Errors[0].Detail, tc.detail)
		})
	}
	// Not JSON: left to the handler's 415.
	r := httptest.NewRequest(http.MethodPost, "/v1/take", strings.NewReader("\xff"))
	r.Header.Set("Content-Type", "text/plain")
	require.Nil(t, rawTextProblem(r))
}

// FuzzRawText: on valid JSON, the scan reports a string exactly when
// encoding/json would have decoded one with a U+FFFD that the body did not
// spell (raw or as \ufffd).
func FuzzRawText(f *testing.F) {
	for _, s := range []string{`{"key":"k"}`, "{\"key\":\"\xff\"}", `{"key":"\ud800"}`, `["\ud800\udc00"]`, `{"\udc00":1}`, "\"\xef\xbf\xbd\"", `"\ufffd"`, `[1,{"a":[true,null,"x"]}]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return
		}
		p := textProblem(b, nil)
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			return
		}
		spelled := bytes.Count(b, []byte("\xef\xbf\xbd")) + bytes.Count(bytes.ToLower(b), []byte(`\ufffd`))
		decoded := countReplacement(v)
		if (p != nil) != (decoded > spelled) {
			t.Fatalf("%q: scan says %+v; decoded %d U+FFFD, spelled %d", b, p, decoded, spelled)
		}
		if p != nil && (p.Status != http.StatusUnprocessableEntity || len(p.Errors) != 1) {
			t.Fatalf("%q: %+v is not one 422 field error", b, p)
		}
	})
}

func countReplacement(v any) int {
	switch v := v.(type) {
	case string:
		return strings.Count(v, "\ufffd")
	case []any:
		n := 0
		for _, e := range v {
			n += countReplacement(e)
		}
		return n
	case map[string]any:
		n := 0
		for k, e := range v {
			n += strings.Count(k, "\ufffd") + countReplacement(e)
		}
		return n
	}
	return 0
}
