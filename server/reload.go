package server

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/sluicerl/sluice/limiter"
)

// Reload makes lim's policies the server's, atomically: a request already
// running finishes on the snapshot it started with, every later one sees
// lim's policies, and none sees a mix. lim must decide on the same rate
// and lease stores as the Limiter the server was built with (the CLI
// builds it over the same stores). A policy the new set lacks answers 404
// policy-removed from then on (leases of it too); one it adds starts its
// metric series at zero. Reload is safe for concurrent use.
func (s *Server) Reload(lim *limiter.Limiter) error {
	if lim == nil {
		return errors.New("server: reload: Limiter is required")
	}
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	lv, err := newLive(lim, s.live.Load())
	if err != nil {
		return err
	}
	s.seedMetrics(lv)
	s.live.Store(lv)
	return nil
}

// Limiter returns the Limiter whose policies are in force now: the one
// the server was built with, or the latest Reload's. A reader that must
// follow reloads (the dashboard) asks it each time rather than keeping
// the first. It is safe for concurrent use.
func (s *Server) Limiter() *limiter.Limiter { return s.live.Load().lim }

// reload serves POST /v1/admin/reload: it runs Config.Reload and answers
// 200 with the policies now in force, or 422 invalid-config with why the
// configuration was refused (the old one stays in force), or 501 when the
// server was built without a Reload.
func (s *Server) reload(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if s.reloadFn == nil {
		writeProblem(w, &problem{Type: typeBlank, Status: http.StatusNotImplemented,
			Detail: "this server was started without a reloadable configuration"})
		return
	}
	if err := s.reloadFn(r.Context()); err != nil {
		var ces limiter.ConfigErrors
		var errs []fieldError
		if errors.As(err, &ces) {
			for _, e := range ces {
				errs = append(errs, fieldError{Pointer: "#", Detail: e.Error()})
			}
		}
		s.log.Warn("server: reload refused; the old configuration stays in force", "err", err)
		writeProblem(w, &problem{Type: TypeInvalidConfig, Title: "Invalid configuration", Status: http.StatusUnprocessableEntity,
			Detail: fmt.Sprintf("the configuration was refused whole and the old one stays in force: %v", err), Errors: errs})
		return
	}
	writeBody(w, http.StatusOK, contentJSON, s.live.Load().listing)
}

// writePolicyRemoved answers a request about a policy a reload removed.
func writePolicyRemoved(w http.ResponseWriter, policy string) {
	writeProblem(w, &problem{Type: TypePolicyRemoved, Title: "Policy removed", Status: http.StatusNotFound,
		Detail: fmt.Sprintf("policy %q was removed by a configuration reload", truncate(policy, 64))})
}
