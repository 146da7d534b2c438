package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/sluicerl/sluice/slot"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/pgstore"
	"github.com/sluicerl/sluice/store/sqlitestore"
)

// openSlots opens the slot store in the records database a --db URL names
// (migrating it) and returns a Scheduler over it and how to release it.
func openSlots(ctx context.Context, flag, raw string, cfg slot.Config) (*slot.Scheduler, func(), error) {
	kind, path, err := parseDBURL(flag, raw)
	if err != nil {
		return nil, nil, err
	}
	switch kind {
	case kindSQLite:
		st, err := sqlitestore.Open(ctx, path, sqlitestore.Config{})
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", flag, err)
		}
		cfg.Store = st
		s, err := slot.New(cfg)
		if err != nil {
			_ = st.Close()
			return nil, nil, err
		}
		return s, func() { _ = st.Close() }, nil
	case kindPostgres:
		pool, err := pgxpool.New(ctx, raw)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", flag, err)
		}
		if _, err := pgstore.Migrate(ctx, pool); err != nil {
			pool.Close()
			return nil, nil, fmt.Errorf("%s: migrate: %w", flag, err)
		}
		st, err := pgstore.New(pool, pgstore.Config{})
		if err != nil {
			pool.Close()
			return nil, nil, fmt.Errorf("%s: %w", flag, err)
		}
		cfg.Store = st
		s, err := slot.New(cfg)
		if err != nil {
			pool.Close()
			return nil, nil, err
		}
		return s, pool.Close, nil
	}
	return nil, nil, usagef("invalid %s %q: slots need sqlite:PATH or postgres://...", flag, raw)
}

// slotOut is a slot as the commands print it (the API's JSON).
type slotOut struct {
	EventID       string `json:"eventId"`
	ConfigName    string `json:"configName"`
	ConfigVersion int64  `json:"configVersion"`
	RequestedTime string `json:"requestedTime"`
	WindowStart   string `json:"windowStart"`
	ScheduledTime string `json:"scheduledTime"`
	Status        string `json:"status"`
}

func toSlotOut(s slot.Slot) slotOut {
	f := func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
	return slotOut{s.EventID, s.ConfigName, s.ConfigVersion, f(s.RequestedTime), f(s.WindowStart), f(s.ScheduledTime), s.Status.String()}
}

// slotsRemote binds --server (empty: work on --db), --token, --timeout and
// --output (client.go) to c, and returns the flags and a func that reports
// whether --server was given, after reading SLUICE_TOKEN and checking them.
func slotsRemote(c *cobra.Command, opts *Options, what string) (*clientFlags, func() (bool, error)) {
	remote := &clientFlags{}
	remote.bind(c, opts, false)
	c.Flags().StringVar(&remote.server, "server", "", what+" through a running server at this base `URL` instead of --db")
	return remote, func() (bool, error) {
		source, err := applyEnv(c.Flags(), opts.Getenv, []envFlag{{"token", "SLUICE_TOKEN"}})
		if err != nil {
			return false, err
		}
		if remote.server == "" {
			if remote.output != "json" && remote.output != "table" {
				return false, usagef("invalid --output %q: want json or table", remote.output)
			}
			return false, nil
		}
		return true, remote.check(source)
	}
}

// send makes one request of a slots command over the server and returns
// the answer's body, or the server's problem as an error.
func (f *clientFlags) send(c *cobra.Command, what, method, path string, body any, ok ...int) ([]byte, error) {
	code, h, out, err := f.call(c.Context(), method, path, body)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(ok, code) {
		return nil, problemError(what, code, h, out)
	}
	return out, nil
}

func newSlotsCmd(opts *Options) *cobra.Command {
	var dbURL string
	cmd := &cobra.Command{
		Use:   "slots",
		Short: "Book future time slots under a capacity limit (seed 003)",
		Long: `Give events execution times so that no window of a config's size holds
more than its maximum: create a config, assign one event, load a bulk feed,
verify the invariants. Slots live in the records database (--db), the same
one 'sluice serve' uses.`,
	}
	cmd.PersistentFlags().StringVar(&dbURL, "db", DefaultDB, "records database `URL` (env SLUICE_DB): sqlite:PATH or postgres://...")
	// with opens the slot store for one subcommand and runs f on it.
	// Commands that only read (verify) must not create the database.
	with := func(c *cobra.Command, cfg slot.Config, f func(*slot.Scheduler) error) error {
		source, err := applyEnv(c.Flags(), opts.Getenv, []envFlag{{"db", "SLUICE_DB"}})
		if err != nil {
			return err
		}
		if c.Name() == "verify" {
			if err := requireDB(source["db"], dbURL); err != nil {
				return err
			}
		}
		s, closeFn, err := openSlots(c.Context(), source["db"], dbURL, cfg)
		if err != nil {
			return err
		}
		defer closeFn()
		return f(s)
	}

	var (
		maxPer   int64
		window   string
		headroom int64
	)
	// Each command's --server, --token, --timeout and --output
	// (slotsRemote), bound after the command is made.
	var (
		configRemote, remote, loadFlags, verifyFlags     *clientFlags
		configReady, assignReady, loadReady, verifyReady func() (bool, error)
	)
	config := &cobra.Command{
		Use:   "config NAME --max N --window PT4S",
		Short: "Store a new version of a slot config and make it active",
		Long: `Store a new version of a slot config in the records database (--db), or
with --server through a running 'sluice serve' (POST /admin/rate-limit/config,
scope admin), and make it active.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			if err := requireFlags(c, "max", "window"); err != nil {
				return err
			}
			d, err := store.ParseWindowSize(window)
			if err != nil {
				return usagef("invalid --window: %v", err)
			}
			cfg := store.SlotConfig{Name: args[0], MaxPerWindow: maxPer, WindowSize: d, Headroom: headroom}
			if err := cfg.Validate(); err != nil {
				return usagef("%v", strings.TrimPrefix(err.Error(), "store: "))
			}
			if remote, err := configReady(); err != nil {
				return err
			} else if remote {
				body := map[string]any{"configName": args[0], "maxPerWindow": maxPer, "windowSize": window}
				if headroom > 0 {
					body["headroom"] = headroom
				}
				out, err := configRemote.send(c, "slots config", http.MethodPost, "/admin/rate-limit/config", body, http.StatusCreated)
				if err != nil {
					return err
				}
				return configRemote.print(opts, out)
			}
			return with(c, slot.Config{}, func(s *slot.Scheduler) error {
				out, err := s.PutConfig(c.Context(), cfg)
				if err != nil {
					return err
				}
				fmt.Fprintf(opts.Stdout, "config %s version %d: at most %d per %s, headroom %d windows\n",
					out.Name, out.Version, out.MaxPerWindow, store.FormatWindowSize(out.WindowSize), out.Headroom)
				return nil
			})
		},
	}
	config.Flags().Int64Var(&maxPer, "max", 0, "most events per window (required)")
	config.Flags().StringVar(&window, "window", "", "window size, an ISO-8601 duration such as PT4S (required)")
	config.Flags().Int64Var(&headroom, "headroom", 0, fmt.Sprintf("windows searched past the first open one (0 means %d)", store.DefaultSlotHeadroom))
	configRemote, configReady = slotsRemote(config, opts, "store the config")

	var cfgName, at string
	assign := &cobra.Command{
		Use:   "assign EVENT_ID --config NAME --at TIME",
		Short: "Assign one event a slot (or print the one it has)",
		Long: `Assign one event a slot in the records database (--db), or with --server
through a running 'sluice serve' (POST /api/v1/slots).`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			if err := requireFlags(c, "at"); err != nil {
				return err
			}
			if err := checkID("EVENT_ID", args[0], store.MaxEventIDLen); err != nil {
				return err
			}
			if err := checkID("--config", cfgName, store.MaxConfigNameLen); err != nil {
				return err
			}
			t, err := time.Parse(time.RFC3339Nano, at)
			if err != nil {
				return usagef("invalid --at %q: want an RFC 3339 time such as 2025-06-01T12:00:00Z", at)
			}
			if isRemote, err := assignReady(); err != nil {
				return err
			} else if isRemote {
				out, err := remote.send(c, "slots assign", http.MethodPost, "/api/v1/slots",
					map[string]string{"eventId": args[0], "configName": cfgName, "requestedTime": at}, http.StatusOK, http.StatusCreated)
				if err != nil {
					return err
				}
				return remote.print(opts, out)
			}
			return with(c, slot.Config{}, func(s *slot.Scheduler) error {
				sl, err := s.Assign(c.Context(), args[0], cfgName, t)
				if err != nil {
					return err
				}
				b, _ := json.Marshal(toSlotOut(sl))
				return remote.print(opts, append(b, '\n'))
			})
		},
	}
	assign.Flags().StringVar(&cfgName, "config", "default", "slot config `name`")
	assign.Flags().StringVar(&at, "at", "", "requested time, RFC 3339 (required)")
	remote, assignReady = slotsRemote(assign, opts, "assign")

	var (
		loadCfg, format string
		batch           int
		quiet           bool
	)
	load := &cobra.Command{
		Use:   "load FILE --config NAME",
		Short: "Assign slots to every event of a CSV or JSON-lines file",
		Long: `Assign slots to every event of FILE in batches, with a progress bar on
stderr and a summary at the end. FILE is CSV (eventId,requestedTime; a
header line is skipped) or JSON lines ({"eventId":...,"requestedTime":...});
the format follows the extension (.csv, .jsonl, .ndjson, .json) or, failing
that, the first character. Use - for standard input. With --server the
batches go to a running 'sluice serve' (POST /api/v1/slots/batch, whose
--batch must not exceed the server's limit) and the summary is printed in
the --output format.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			if batch < 1 || batch > 100_000 {
				return usagef("invalid --batch %d: want 1 to 100000", batch)
			}
			if format != "" && format != "csv" && format != "jsonl" {
				return usagef("invalid --format %q: want csv or jsonl", format)
			}
			if err := checkID("--config", loadCfg, store.MaxConfigNameLen); err != nil {
				return err
			}
			isRemote, err := loadReady()
			if err != nil {
				return err
			}
			events, err := readEvents(args[0], format)
			if err != nil {
				return err
			}
			if isRemote {
				return loadRemote(c, opts, loadFlags, loadCfg, events, batch)
			}
			return with(c, slot.Config{MaxBatch: batch}, func(s *slot.Scheduler) error {
				return loadEvents(c.Context(), opts, s, loadCfg, events, batch, quiet)
			})
		},
	}
	load.Flags().StringVar(&loadCfg, "config", "default", "slot config `name`")
	load.Flags().StringVar(&format, "format", "", "csv or jsonl (default: from the file)")
	load.Flags().IntVar(&batch, "batch", 5000, "events per batch")
	load.Flags().BoolVar(&quiet, "quiet", false, "no progress bar (there is none unless stderr is a terminal)")
	loadFlags, loadReady = slotsRemote(load, opts, "assign the slots")

	verify := &cobra.Command{
		Use:   "verify",
		Short: "Check the slot invariants on the database; exit 1 if one fails",
		Long: `Check, over every window and slot: no window holds more than its config's
maximum; every window's counter equals its rows; every slot lies inside its
window and not before its requested time; every CLOSED window is followed by
a window row. Prints what is wrong, if anything. With --server, the server
checks its records database (GET /admin/rate-limit/verify, scope admin) and
the answer is printed in the --output format.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			if isRemote, err := verifyReady(); err != nil {
				return err
			} else if isRemote {
				out, err := verifyFlags.send(c, "slots verify", http.MethodGet, "/admin/rate-limit/verify", nil, http.StatusOK)
				if err != nil {
					return err
				}
				var rep struct {
					OK       bool     `json:"ok"`
					Problems []string `json:"problems"`
				}
				if err := json.Unmarshal(out, &rep); err != nil {
					return fmt.Errorf("slots verify: the server's answer is not JSON: %w", err)
				}
				if err := verifyFlags.print(opts, out); err != nil {
					return err
				}
				if !rep.OK {
					return fmt.Errorf("slots verify: %d problems (at most %d listed)", len(rep.Problems), store.MaxReportedProblems)
				}
				return nil
			}
			return with(c, slot.Config{}, func(s *slot.Scheduler) error {
				rep, err := s.Verify(c.Context())
				if err != nil {
					return err
				}
				fmt.Fprintf(opts.Stdout, "%d slots in %d windows of %d configs\n", rep.Slots, rep.Windows, rep.Configs)
				for _, p := range rep.Problems {
					fmt.Fprintln(opts.Stdout, "PROBLEM:", p)
				}
				if len(rep.Problems) > 0 {
					return fmt.Errorf("slots verify: %d problems (at most %d listed)", len(rep.Problems), store.MaxReportedProblems)
				}
				fmt.Fprintln(opts.Stdout, "ok: no window over its maximum, counters equal rows, every slot inside its window")
				return nil
			})
		},
	}
	verifyFlags, verifyReady = slotsRemote(verify, opts, "verify")
	cmd.AddCommand(config, assign, load, verify)
	return cmd
}

// loadRemote assigns events in batches through the server (POST
// /api/v1/slots/batch) and prints the totals; events that got no slot
// make it fail after the summary, as the local load does.
func loadRemote(c *cobra.Command, opts *Options, f *clientFlags, cfgName string, events []slot.Event, batch int) error {
	type batchEvent struct {
		EventID       string `json:"eventId"`
		RequestedTime string `json:"requestedTime"`
	}
	var sum struct {
		ConfigName string `json:"configName"`
		Events     int    `json:"events"`
		Assigned   int    `json:"assigned"`
		Existing   int    `json:"existing"`
		Exhausted  int    `json:"exhausted"`
	}
	sum.ConfigName, sum.Events = cfgName, len(events)
	for i := 0; i < len(events); i += batch {
		part := events[i:min(i+batch, len(events))]
		evs := make([]batchEvent, len(part))
		for j, e := range part {
			evs[j] = batchEvent{e.EventID, e.RequestedTime.UTC().Format(time.RFC3339Nano)}
		}
		out, err := f.send(c, fmt.Sprintf("slots load: events %d to %d", i+1, i+len(part)), http.MethodPost, "/api/v1/slots/batch",
			map[string]any{"configName": cfgName, "events": evs}, http.StatusOK)
		if err != nil {
			return err
		}
		var res struct{ Assigned, Existing, Exhausted int }
		if err := json.Unmarshal(out, &res); err != nil {
			return fmt.Errorf("slots load: the server's answer is not JSON: %w", err)
		}
		sum.Assigned += res.Assigned
		sum.Existing += res.Existing
		sum.Exhausted += res.Exhausted
	}
	b, _ := json.Marshal(sum)
	if err := f.print(opts, append(b, '\n')); err != nil {
		return err
	}
	if sum.Exhausted > 0 {
		return fmt.Errorf("%d events got no slot within the headroom", sum.Exhausted)
	}
	return nil
}

type fileEvent struct {
	EventID       string `json:"eventId"`
	RequestedTime string `json:"requestedTime"`
}

// readEvents reads a CSV or JSON-lines file of events; errors name the
// line.
func readEvents(name, format string) ([]slot.Event, error) {
	var r io.Reader
	if name == "-" {
		r = os.Stdin
	} else {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	br := bufio.NewReaderSize(r, 1<<20)
	if format == "" {
		switch strings.ToLower(filepath.Ext(name)) {
		case ".csv":
			format = "csv"
		case ".jsonl", ".ndjson", ".json":
			format = "jsonl"
		default:
			format = "csv"
			if b, err := br.Peek(1); err == nil && b[0] == '{' {
				format = "jsonl"
			}
		}
	}
	parseTime := func(line int, s string) (time.Time, error) {
		t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(s))
		if err != nil {
			return time.Time{}, fmt.Errorf("%s:%d: requestedTime %q is not an RFC 3339 time such as 2025-06-01T12:00:00Z", name, line, s)
		}
		return t, nil
	}
	// check refuses what a batch would refuse (empty or long id, time
	// outside 1970 to 9999), naming the line rather than a batch index.
	check := func(line int, id string, t time.Time) error {
		ev := store.SlotEvent{EventID: id, RequestedTime: t}
		if err := ev.Check(); err != nil {
			return fmt.Errorf("%s:%d: %s", name, line, strings.TrimPrefix(err.Error(), "store: "))
		}
		return nil
	}
	var out []slot.Event
	if format == "csv" {
		cr := csv.NewReader(br)
		cr.FieldsPerRecord = 2
		cr.TrimLeadingSpace = true
		cr.ReuseRecord = true
		for {
			rec, err := cr.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			line, _ := cr.FieldPos(0)
			if err != nil {
				return nil, fmt.Errorf("%s: %w (want eventId,requestedTime)", name, err)
			}
			if len(out) == 0 && strings.EqualFold(strings.TrimSpace(rec[0]), "eventId") {
				continue // header
			}
			t, err := parseTime(line, rec[1])
			if err != nil {
				return nil, err
			}
			if err := check(line, rec[0], t); err != nil {
				return nil, err
			}
			out = append(out, slot.Event{EventID: rec[0], RequestedTime: t})
		}
		return out, nil
	}
	sc := bufio.NewScanner(br)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if !utf8.Valid(b) {
			// The decoder would turn the bytes into U+FFFD without a word.
			return nil, fmt.Errorf("%s:%d: not valid UTF-8", name, line)
		}
		var fe fileEvent
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&fe); err != nil {
			return nil, fmt.Errorf("%s:%d: %v (want {\"eventId\":...,\"requestedTime\":...})", name, line, strings.TrimPrefix(err.Error(), "json: "))
		}
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s:%d: data after the JSON object (want one object per line)", name, line)
		}
		t, err := parseTime(line, fe.RequestedTime)
		if err != nil {
			return nil, err
		}
		if err := check(line, fe.EventID, t); err != nil {
			return nil, err
		}
		out = append(out, slot.Event{EventID: fe.EventID, RequestedTime: t})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s:%d: %w (lines are at most 1 MiB)", name, line+1, err)
	}
	return out, nil
}

func loadEvents(ctx context.Context, opts *Options, s *slot.Scheduler, cfgName string, events []slot.Event, batch int, quiet bool) error {
	if _, err := s.Config(ctx, cfgName); err != nil {
		return fmt.Errorf("config %q: %w", cfgName, err)
	}
	// The bar redraws itself with \r: only on a terminal. Elsewhere (a
	// file, a pipe, a CI log) the summary on stdout says it all.
	if !isTerminal(opts.Stderr) {
		quiet = true
	}
	bar := progressbar.NewOptions(len(events),
		progressbar.OptionSetWriter(opts.Stderr),
		progressbar.OptionSetDescription("assigning"),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("events"),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetVisibility(!quiet),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(opts.Stderr) }),
	)
	// Start the clock now: started by the first Add, the bar would time
	// the first batch from its end, and show a rate of millions a second.
	bar.StartWithoutRender()
	start := time.Now()
	var news, existing, exhausted int
	var first, last time.Time
	for i := 0; i < len(events); i += batch {
		part := events[i:min(i+batch, len(events))]
		res, err := s.AssignBatch(ctx, cfgName, part)
		if err != nil {
			return fmt.Errorf("events %d to %d: %w", i+1, i+len(part), err)
		}
		for _, r := range res {
			switch {
			case r.Err != nil:
				exhausted++
				continue
			case r.Slot.Status == store.SlotNew:
				news++
			default:
				existing++
			}
			if first.IsZero() || r.Slot.WindowStart.Before(first) {
				first = r.Slot.WindowStart
			}
			if r.Slot.WindowStart.After(last) {
				last = r.Slot.WindowStart
			}
		}
		_ = bar.Add(len(part))
	}
	_ = bar.Finish()
	el := time.Since(start)
	fmt.Fprintf(opts.Stdout, "%d events in %s (%.0f events/s): %d new, %d existing, %d exhausted\n",
		len(events), el.Round(time.Millisecond), float64(len(events))/max(el.Seconds(), 1e-9), news, existing, exhausted)
	if !first.IsZero() {
		fmt.Fprintf(opts.Stdout, "windows from %s to %s\n", first.UTC().Format(time.RFC3339), last.UTC().Format(time.RFC3339))
	}
	if exhausted > 0 {
		return fmt.Errorf("%d events got no slot within the headroom", exhausted)
	}
	return nil
}
