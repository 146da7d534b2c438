package dashboard

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluicerl/sluice/store"
)

// State-changing actions: POST forms that carry confirm=yes once a person
// confirmed (the page's dialog sets it; without JavaScript the action
// answers with a confirmation form). Each asks Config.Authorize with
// action true, refuses cross-site posts, and answers JSON to the page's
// script ({"ok":bool,"message":...}) or redirects a plain form back.

// holderHash is the holder fingerprint GET /v1/leases shows: the first 16
// hex digits of the holder id's SHA-256. Pages show it, never the holder
// id, which would let anyone renew or release the lease.
func holderHash(holder string) string {
	h := sha256.Sum256([]byte(holder))
	return hex.EncodeToString(h[:8])
}

type actionResult struct {
	OK      bool   `json:"ok"`
	Message string `json:"message"`
}

// sameOrigin refuses a post another site's page sent (CSRF): a browser
// says where a post comes from in Sec-Fetch-Site or Origin.
func sameOrigin(r *http.Request) bool {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" {
		return s == "same-origin" || s == "none"
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		return err == nil && u.Host == r.Host
	}
	return true // not a browser's cross-site post
}

// action wraps an action: checks, confirmation, and the answer.
func (d *Dashboard) action(w http.ResponseWriter, r *http.Request, what, back string, do func(ctx context.Context) (int, string)) {
	if !sameOrigin(r) {
		d.answer(w, r, back, http.StatusForbidden, "dashboard: refused a post from another site")
		return
	}
	if err := r.ParseForm(); err != nil {
		d.answer(w, r, back, http.StatusBadRequest, "dashboard: unreadable form: "+err.Error())
		return
	}
	if r.PostForm.Get("confirm") != "yes" {
		d.confirmPage(w, r, what, back)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	status, msg := do(ctx)
	d.answer(w, r, back, status, msg)
}

func (d *Dashboard) answer(w http.ResponseWriter, r *http.Request, back string, status int, msg string) {
	if strings.Contains(r.Header.Get("Accept"), "application/json") {
		b, _ := json.Marshal(actionResult{OK: status < 300, Message: msg})
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(status)
		_, _ = w.Write(append(b, '\n'))
		return
	}
	if status < 300 {
		http.Redirect(w, r, back, http.StatusSeeOther)
		return
	}
	http.Error(w, msg, status)
}

// confirmPage asks a person without JavaScript to confirm.
func (d *Dashboard) confirmPage(w http.ResponseWriter, r *http.Request, what, back string) {
	type field struct{ Name, Value string }
	var fields []field
	for k, vs := range r.PostForm {
		if k != "confirm" && len(vs) > 0 {
			fields = append(fields, field{k, vs[0]})
		}
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_ = confirmTemplate.Execute(w, struct {
		What, Action, Back string
		Fields             []field
	}{what, r.URL.Path, back, fields})
}

// connectorAction pauses or resumes a connector through the API.
func (d *Dashboard) connectorAction(w http.ResponseWriter, r *http.Request) {
	id, op := r.PathValue("id"), r.PathValue("op")
	back := Prefix + "jobs"
	if op != "pause" && op != "resume" {
		d.answer(w, r, back, http.StatusNotFound, "dashboard: no such connector action; want pause or resume")
		return
	}
	if d.cfg.API == nil {
		d.answer(w, r, back, http.StatusNotFound, "dashboard: this server offers no connector actions")
		return
	}
	d.action(w, r, fmt.Sprintf("%s connector %s", op, id), back, func(ctx context.Context) (int, string) {
		status, body := d.callAPI(ctx, r, http.MethodPost, "/v1/connectors/"+url.PathEscape(id)+"/"+op)
		if status >= 300 {
			return status, fmt.Sprintf("the API refused to %s connector %s (%d): %s", op, id, status, body)
		}
		past := map[string]string{"pause": "paused", "resume": "resumed"}[op]
		return http.StatusOK, fmt.Sprintf("connector %s %s", id, past)
	})
}

// flushSlots flushes the slot config cache through the API.
func (d *Dashboard) flushSlots(w http.ResponseWriter, r *http.Request) {
	back := Prefix + "slots"
	if d.cfg.API == nil || d.cfg.Slots == nil {
		d.answer(w, r, back, http.StatusNotFound, "dashboard: this server has no slot config cache")
		return
	}
	d.action(w, r, "flush the slot config cache", back, func(ctx context.Context) (int, string) {
		status, body := d.callAPI(ctx, r, http.MethodPost, "/admin/rate-limit/cache/flush")
		if status >= 300 {
			return status, fmt.Sprintf("the API refused to flush (%d): %s", status, body)
		}
		return http.StatusOK, "slot config cache flushed"
	})
}

// releaseLease releases a held lease, found by policy, key, holder
// fingerprint and fencing token. The API releases only for the holder
// (the lease id holds the holder id), so this asks the limiter directly.
func (d *Dashboard) releaseLease(w http.ResponseWriter, r *http.Request) {
	back := Prefix + "leases"
	d.action(w, r, "release a lease", back, func(ctx context.Context) (int, string) {
		f := r.PostForm
		policy, key, hash := f.Get("policy"), f.Get("key"), f.Get("holder")
		token, err := strconv.ParseInt(f.Get("token"), 10, 64)
		if err != nil {
			return http.StatusBadRequest, fmt.Sprintf("token must be a whole number, got %q", trunc(f.Get("token"), 32))
		}
		if err := store.CheckKey(key); err != nil {
			return http.StatusUnprocessableEntity, err.Error()
		}
		hs, err := d.lim().Holders(ctx, policy, key)
		if err != nil {
			return http.StatusServiceUnavailable, "the lease store did not answer: " + err.Error()
		}
		for _, h := range hs {
			if h.Token == token && holderHash(h.Holder) == hash {
				if err := d.lim().Release(ctx, policy, key, h.Holder, token); err != nil {
					return http.StatusConflict, "the lease could not be released: " + err.Error()
				}
				return http.StatusOK, fmt.Sprintf("lease %d of %s released", token, key)
			}
		}
		return http.StatusNotFound, "that lease is no longer held"
	})
}

// callAPI sends a body-less request to the server's API in process, with
// the page request's credentials, and returns the status and body.
func (d *Dashboard) callAPI(ctx context.Context, from *http.Request, method, path string) (int, string) {
	req, err := http.NewRequestWithContext(ctx, method, path, nil)
	if err != nil {
		return http.StatusInternalServerError, err.Error()
	}
	req.Host = from.Host
	req.RemoteAddr = from.RemoteAddr
	for _, h := range []string{"Authorization", "Cookie"} {
		if v := from.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	rec := &captureWriter{header: http.Header{}}
	d.cfg.API.ServeHTTP(rec, req)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return rec.status, trunc(strings.TrimSpace(rec.body.String()), 300)
}

// captureWriter is an http.ResponseWriter that keeps the answer.
type captureWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (c *captureWriter) Header() http.Header { return c.header }
func (c *captureWriter) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
}
func (c *captureWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	if c.body.Len() < 4096 {
		c.body.Write(b[:min(len(b), 4096-c.body.Len())])
	}
	return len(b), nil
}
