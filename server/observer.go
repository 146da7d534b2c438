package server

import "github.com/sluicerl/sluice/limiter"

// Observer sees what the server decides, for a live view such as the
// dashboard (package server/dashboard): every counted take decision with
// its key, every lease acquire's outcome, and the slot configs the server
// serves. Its methods run on the request path after the decision, so they
// must be quick and safe for concurrent use; they never change an answer.
type Observer interface {
	// ObserveDecision sees one policy's decision for key. granted is
	// whether the request as a whole was granted (an item of a refused
	// all-or-nothing take counts as denied even when its own policy had
	// room).
	ObserveDecision(key string, d limiter.Decision, granted bool)
	// ObserveLease sees a lease acquire by holder for a concurrency
	// policy's key that reached the store: acquired, or refused because
	// every permit (or a rate item) was held. A holder refused and not yet
	// granted is one waiting for a permit.
	ObserveLease(policy, key, holder string, acquired bool)
	// ObserveSlotConfig sees the name of a slot config that was put or
	// assigned under.
	ObserveSlotConfig(name string)
}

func (s *Server) observeLease(policy, key, holder string, acquired bool) {
	if s.obs != nil {
		s.obs.ObserveLease(policy, key, holder, acquired)
	}
}

func (s *Server) observeSlotConfig(name string) {
	if s.obs != nil {
		s.obs.ObserveSlotConfig(name)
	}
}
