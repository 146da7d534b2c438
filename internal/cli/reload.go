package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/sluicerl/sluice/auth"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/provider"
	"github.com/sluicerl/sluice/server"
)

// liveConfig is what serve reads from --config and --tokens, and rereads
// on reload.
type liveConfig struct {
	policies []limiter.Policy
	from     string
	tokens   *auth.Tokens // nil: no token source
}

// loadLive reads the policy file (or the defaults) and the token sources:
// the policy file's auth section and the --tokens file. Every check runs
// before anything is swapped in, so a bad file is refused whole.
func loadLive(config, tokensFile string) (*liveConfig, error) {
	lc := &liveConfig{policies: DefaultPolicies(), from: "built-in defaults"}
	var sources []*auth.Tokens
	if config != "" {
		data, err := os.ReadFile(config)
		if err != nil {
			return nil, fmt.Errorf("policy file: %w", err)
		}
		if lc.policies, err = limiter.Parse(config, data); err != nil {
			return nil, err
		}
		lc.from = config
		t, found, err := auth.ParseConfig(config, data)
		if err != nil {
			return nil, err
		}
		if found {
			sources = append(sources, t)
		}
	}
	if tokensFile != "" {
		t, err := auth.LoadFile(tokensFile)
		if err != nil {
			return nil, err
		}
		sources = append(sources, t)
	}
	if len(sources) > 0 {
		t, err := auth.Merge(sources...)
		if err != nil {
			return nil, err
		}
		lc.tokens = t
	}
	return lc, nil
}

// reloader rereads the configuration and swaps it into a running server.
// It is safe for concurrent use: reloads run one at a time.
type reloader struct {
	mu             sync.Mutex
	config, tokens string
	profiles       []string // --profiles
	st             *stateStore
	srv            *server.Server
	keys           *auth.Keyring // nil: auth is off
	log            *slog.Logger
	// extra are policies that are not --config's but must survive a
	// reload: the Envoy rate limit rules' (--rls-config), whose service
	// keeps answering from the same store.
	extra []limiter.Policy
	// hooks are further configuration reloaded with the policies
	// (the provider profiles, profileHook): each checks its part of
	// the new configuration and returns the function that swaps it in,
	// or an error that refuses the whole reload. Every check runs before
	// any swap.
	hooks []func(lc *liveConfig) (swap func(), err error)
}

// reload rereads and swaps in the configuration, or returns why not and
// leaves the old one in force.
func (r *reloader) reload(_ context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	lc, err := loadLive(r.config, r.tokens)
	if err != nil {
		return err
	}
	switch {
	case r.keys == nil && lc.tokens != nil:
		return errors.New("reload: the new configuration has tokens but the server started without auth; restart to turn auth on")
	case r.keys != nil && lc.tokens == nil:
		return errors.New("reload: the new configuration has no tokens but the server started with auth; auth cannot be turned off by a reload")
	}
	if r.st.outages != nil {
		for _, p := range lc.policies {
			if p.Outage != r.st.outages[p.Name] {
				return fmt.Errorf("reload: policy %q: on_store_outage is fixed at start on a shared --state; restart to change it", p.Name)
			}
		}
	}
	policies := append(slices.Clip(lc.policies), r.extra...)
	lim, err := limiter.New(limiter.Config{Store: r.st.store, Leases: r.st.leases, Policies: policies})
	if err != nil {
		return err
	}
	var swaps []func()
	for _, h := range r.hooks {
		swap, err := h(lc)
		if err != nil {
			return err
		}
		swaps = append(swaps, swap)
	}
	if err := r.srv.Reload(lim); err != nil {
		return err
	}
	if r.keys != nil {
		r.keys.Store(lc.tokens)
	}
	for _, swap := range swaps {
		swap()
	}
	r.log.Info("configuration reloaded", "policies", len(lc.policies), "config", lc.from, "tokens", lc.tokens.Len())
	return nil
}

// profileHook rereads the --profiles files with the rest of the
// configuration: a malformed file refuses the whole reload (its error names
// the file, the line and the field) and reg keeps the profiles it had.
func (r *reloader) profileHook(reg *provider.Registry) func(*liveConfig) (func(), error) {
	return func(*liveConfig) (func(), error) {
		s, err := provider.Load(r.profiles...)
		if err != nil {
			return nil, fmt.Errorf("--profiles: %w", err)
		}
		return func() { reg.Swap(s) }, nil
	}
}

// reloadLoop reloads on SIGHUP (from hup) and, with watch, when a configuration
// file changes (fsnotify on its directory, so that editors that replace
// the file are seen), until ctx ends. A failed reload is logged and the
// old configuration stays.
// hup is a channel notifySIGHUP made; reloadLoop stops its notifications
// when it returns.
func (r *reloader) reloadLoop(ctx context.Context, hup chan os.Signal, watch bool) {
	defer signal.Stop(hup)
	var events <-chan fsnotify.Event
	var errs <-chan error
	files := map[string]bool{}
	if watch {
		w, err := r.watch(files)
		if err != nil {
			r.log.Error("reloading on file change is off; SIGHUP and POST /v1/admin/reload still reload", "err", err)
		} else {
			defer w.Close()
			events, errs = w.Events, w.Errors
		}
	}
	// Editors write a file in several steps: reload once the events
	// stop for a moment.
	var debounce <-chan time.Time
	var timer *time.Timer
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			r.logged(ctx, "SIGHUP")
		case ev := <-events:
			if files[filepath.Clean(ev.Name)] && ev.Op&(fsnotify.Write|fsnotify.Create|fsnotify.Rename|fsnotify.Remove) != 0 {
				if timer == nil {
					timer = time.NewTimer(100 * time.Millisecond)
				} else {
					timer.Reset(100 * time.Millisecond)
				}
				debounce = timer.C
			}
		case <-debounce:
			debounce = nil
			r.logged(ctx, "file change")
		case err := <-errs:
			r.log.Warn("watching the configuration failed", "err", err)
		}
	}
}

// watch watches the directories of the configuration files, filling
// files with their absolute paths.
func (r *reloader) watch(files map[string]bool) (*fsnotify.Watcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch configuration: %w", err)
	}
	dirs := map[string]bool{}
	for _, f := range append([]string{r.config, r.tokens}, r.profiles...) {
		if f == "" {
			continue
		}
		abs, err := filepath.Abs(f)
		if err != nil {
			_ = w.Close()
			return nil, fmt.Errorf("watch %s: %w", f, err)
		}
		files[abs] = true
		if d := filepath.Dir(abs); !dirs[d] {
			dirs[d] = true
			if err := w.Add(d); err != nil {
				_ = w.Close()
				return nil, fmt.Errorf("watch %s: %w", d, err)
			}
		}
	}
	return w, nil
}

func (r *reloader) logged(ctx context.Context, why string) {
	if err := r.reload(ctx); err != nil {
		r.log.Error("reload refused; the old configuration stays in force", "trigger", why, "err", err)
	}
}

// notifySIGHUP starts delivering SIGHUP to a new channel. serve calls it
// before it says it is ready, so that a SIGHUP from then on reloads and
// never ends the process.
func notifySIGHUP() chan os.Signal {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	return hup
}

// loopbackOnly reports whether addr listens on loopback interfaces only:
// an empty host (every interface) or a name other than localhost is not.
func loopbackOnly(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
