package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/sluicerl/sluice/job"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/pgstore"
	"github.com/sluicerl/sluice/store/sqlitestore"
)

// openJobs opens the job store in the records database a --db URL names
// (migrating it) and returns how to release it.
func openJobs(ctx context.Context, flag, raw string) (store.JobStore, func(), error) {
	kind, path, err := parseStoreURL(flag, raw)
	if err != nil {
		return nil, nil, err
	}
	switch kind {
	case kindSQLite:
		st, err := sqlitestore.Open(ctx, path, sqlitestore.Config{})
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", flag, err)
		}
		return st, func() { _ = st.Close() }, nil
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
		return st, pool.Close, nil
	}
	return nil, nil, usagef("invalid %s %q: jobs need sqlite:PATH or postgres://...", flag, raw)
}

// jobCmds builds the connectors, jobs, runs, gaps and worker commands,
// which share the --db flag handling.
type jobCmds struct {
	opts  *Options
	dbURL string
}

func (j *jobCmds) dbFlag(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&j.dbURL, "db", DefaultDB, "records database `URL` (env SLUICE_DB): sqlite:PATH or postgres://...")
}

func (j *jobCmds) with(c *cobra.Command, f func(store.JobStore) error) error {
	source, err := applyEnv(c.Flags(), j.opts.Getenv, []envFlag{{"db", "SLUICE_DB"}})
	if err != nil {
		return err
	}
	s, closeFn, err := openJobs(c.Context(), source["db"], j.dbURL)
	if err != nil {
		return err
	}
	defer closeFn()
	return f(s)
}

func (j *jobCmds) print(v any) {
	b, _ := json.Marshal(v)
	fmt.Fprintln(j.opts.Stdout, string(b))
}

// listFlags adds --after and --limit and the given filters.
func listFlags(cmd *cobra.Command, p *store.ListParams, filters ...string) {
	cmd.Flags().StringVar(&p.After, "after", "", "list after this id (the last one of the previous page)")
	cmd.Flags().IntVar(&p.Limit, "limit", 0, "most records to list (0 means 100)")
	for _, f := range filters {
		switch f {
		case "connector":
			cmd.Flags().StringVar(&p.ConnectorID, "connector", "", "only this connector's records")
		case "job":
			cmd.Flags().StringVar(&p.JobID, "job", "", "only this job's records")
		case "group":
			cmd.Flags().StringVar(&p.GroupKey, "group", "", "only this fairness group's jobs")
		}
	}
}

// storeErr words a job store error for the command line: the user's
// mistake as a usage error, anything else as it is.
func storeErr(err error) error {
	if errors.Is(err, store.ErrInvalidJob) {
		return usagef("%s", strings.TrimPrefix(err.Error(), "store: "))
	}
	return err
}

func newConnectorsCmd(opts *Options) *cobra.Command {
	j := &jobCmds{opts: opts}
	cmd := &cobra.Command{
		Use:   "connectors",
		Short: "List, show, pause, resume and import connectors (seed 000)",
		Long: `A connector is one provider account: its status (active, paused,
disabled), the limiter policies that pace it and its provider profile. It
owns jobs. Records live in the records database (--db).`,
	}
	j.dbFlag(cmd)
	var lp store.ListParams
	list := &cobra.Command{Use: "list", Short: "List connectors, one JSON object a line", Args: usageArgs(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			return j.with(c, func(s store.JobStore) error {
				cs, err := s.ListConnectors(c.Context(), lp)
				if err != nil {
					return storeErr(err)
				}
				for _, x := range cs {
					j.print(x)
				}
				return nil
			})
		}}
	listFlags(list, &lp)
	get := &cobra.Command{Use: "get ID", Short: "Show a connector", Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			return j.with(c, func(s store.JobStore) error {
				x, err := s.GetConnector(c.Context(), args[0])
				if err != nil {
					return storeErr(err)
				}
				j.print(x)
				return nil
			})
		}}
	status := func(use, short string, st store.ConnectorStatus) *cobra.Command {
		return &cobra.Command{Use: use + " ID", Short: short, Args: usageArgs(cobra.ExactArgs(1)),
			RunE: func(c *cobra.Command, args []string) error {
				return j.with(c, func(s store.JobStore) error {
					if err := s.SetConnectorStatus(c.Context(), args[0], st); err != nil {
						return storeErr(err)
					}
					fmt.Fprintf(opts.Stdout, "connector %s %s\n", args[0], st)
					return nil
				})
			}}
	}
	imp := &cobra.Command{Use: "import FILE", Short: "Create or update connectors and their jobs from a YAML file (pairs x timeframes x types)",
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			data, err := os.ReadFile(args[0])
			if err != nil {
				return usagef("%v", err)
			}
			im, err := job.ParseImport(data)
			if err != nil {
				return usagef("%s: %v", args[0], err)
			}
			return j.with(c, func(s store.JobStore) error {
				res, err := im.Apply(c.Context(), s)
				if err != nil {
					return storeErr(err)
				}
				fmt.Fprintf(opts.Stdout, "connectors: %d created, %d updated, %d unchanged; jobs: %d created, %d updated, %d unchanged\n",
					res.ConnectorsCreated, res.ConnectorsUpdated, res.ConnectorsUnchanged, res.JobsCreated, res.JobsUpdated, res.JobsUnchanged)
				return nil
			})
		}}
	cmd.AddCommand(list, get, status("pause", "Pause a connector: none of its jobs run", store.ConnectorPaused),
		status("resume", "Resume a paused or disabled connector", store.ConnectorActive),
		status("disable", "Disable a connector", store.ConnectorDisabled), imp)
	return cmd
}

func newJobsCmd(opts *Options) *cobra.Command {
	j := &jobCmds{opts: opts}
	cmd := &cobra.Command{Use: "jobs", Short: "List, show and trigger jobs",
		Long: `A job (such as binance:BTC/USDT:1m:ohlcv) is one stream of a connector:
type, params, priority, schedule, fairness group, cursors and stats.`}
	j.dbFlag(cmd)
	var lp store.ListParams
	list := &cobra.Command{Use: "list", Short: "List jobs, one JSON object a line", Args: usageArgs(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			return j.with(c, func(s store.JobStore) error {
				js, err := s.ListJobs(c.Context(), lp)
				if err != nil {
					return storeErr(err)
				}
				for _, x := range js {
					j.print(x)
				}
				return nil
			})
		}}
	listFlags(list, &lp, "connector", "group")
	get := &cobra.Command{Use: "get ID", Short: "Show a job", Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			return j.with(c, func(s store.JobStore) error {
				x, err := s.GetJob(c.Context(), args[0])
				if err != nil {
					return storeErr(err)
				}
				j.print(x)
				return nil
			})
		}}
	trigger := &cobra.Command{Use: "trigger ID", Short: "Make a job due now (and clear its park)", Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			return j.with(c, func(s store.JobStore) error {
				if err := s.TriggerJob(c.Context(), args[0], time.Time{}); err != nil {
					return storeErr(err)
				}
				fmt.Fprintf(opts.Stdout, "job %s due now\n", args[0])
				return nil
			})
		}}
	cmd.AddCommand(list, get, trigger, newGroupsCmd(j))
	return cmd
}

// newGroupsCmd builds "jobs groups": the fairness groups and their weights.
func newGroupsCmd(j *jobCmds) *cobra.Command {
	cmd := &cobra.Command{Use: "groups", Short: "List fairness groups and set their weights",
		Long: `A fairness group (a shop, an account; a job's group_key, or its
connector) is served in claim rounds: per round a group gives up to its
weight in jobs (1 to 1000; 1 for a group never set), and groups with fewer
running jobs per unit of weight go first.`,
		Args: usageArgs(noSubcommand), RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() }}
	var lp store.ListParams
	list := &cobra.Command{Use: "list", Short: "List groups with their weights, one JSON object a line", Args: usageArgs(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			return j.with(c, func(s store.JobStore) error {
				gs, err := s.ListGroups(c.Context(), lp)
				if err != nil {
					return storeErr(err)
				}
				for _, g := range gs {
					j.print(g)
				}
				return nil
			})
		}}
	listFlags(list, &lp)
	weight := &cobra.Command{Use: "weight GROUP N", Short: "Set a group's weight (1 to 1000)", Args: usageArgs(cobra.ExactArgs(2)),
		RunE: func(c *cobra.Command, args []string) error {
			n, err := strconv.Atoi(args[1])
			if err != nil || n < 1 || n > store.MaxGroupWeight {
				return usagef("weight must be an integer from 1 to %d, got %q", store.MaxGroupWeight, args[1])
			}
			return j.with(c, func(s store.JobStore) error {
				if err := s.SetGroupWeight(c.Context(), args[0], n); err != nil {
					return storeErr(err)
				}
				j.print(store.Group{Key: args[0], Weight: n})
				return nil
			})
		}}
	cmd.AddCommand(list, weight)
	return cmd
}

// newRecordsCmd builds runs or gaps: a newest-first listing.
func newRecordsCmd[T any](opts *Options, use, short string, f func(store.JobStore) func(context.Context, store.ListParams) ([]T, error)) *cobra.Command {
	j := &jobCmds{opts: opts}
	var lp store.ListParams
	cmd := &cobra.Command{Use: use, Short: short, Args: usageArgs(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			return j.with(c, func(s store.JobStore) error {
				xs, err := f(s)(c.Context(), lp)
				if err != nil {
					return storeErr(err)
				}
				for _, x := range xs {
					j.print(x)
				}
				return nil
			})
		}}
	j.dbFlag(cmd)
	listFlags(cmd, &lp, "connector", "job")
	return cmd
}

func newRunsCmd(opts *Options) *cobra.Command {
	return newRecordsCmd(opts, "runs", "List runs, newest first (outcome, requests, retries, slices)",
		func(s store.JobStore) func(context.Context, store.ListParams) ([]store.RunRecord, error) {
			return s.ListRuns
		})
}

func newGapsCmd(opts *Options) *cobra.Command {
	return newRecordsCmd(opts, "gaps", "List resumable gap records, newest first",
		func(s store.JobStore) func(context.Context, store.ListParams) ([]store.GapRecord, error) {
			return s.ListGaps
		})
}

// Exit codes and output lines of a --exec handler (see newWorkerCmd).
const (
	exitPressure = 75 // EX_TEMPFAIL: source pressure, park
)

func newWorkerCmd(opts *Options) *cobra.Command {
	j := &jobCmds{opts: opts}
	var (
		execCmd     string
		types       []string
		concurrency int
		claimAhead  int
		leaseTTL    time.Duration
		holder      string
		config      string
		state       string
	)
	cmd := &cobra.Command{
		Use:   "worker --exec CMD --type T...",
		Short: "Run jobs in this process, each by an external command",
		Long: `Claim due jobs of the given types (fairly between groups, under a lease
with a fencing token) and run each by the command --exec names (through
sh -c), until interrupted; then finish or release what is held.

The command gets the job in its environment: SLUICE_JOB_ID, SLUICE_JOB_TYPE,
SLUICE_JOB_PARAMS (JSON), SLUICE_JOB_CURSOR, SLUICE_JOB_CATCH_UP_CURSOR,
SLUICE_JOB_TOKEN. After each slice it has durably written it prints a line
"commit CURSOR" (or "commit-catch-up CURSOR"); the cursor moves only then,
fenced by the token. It may print "park REASON SECONDS" (source pressure:
the job waits, no failure counted) or "gap REASON" (request_cap, wall_clock
or retry_budget: a resumable gap) before exiting. Exit 0 is success, 75
source pressure, anything else a failure (with backoff). Pacing of the
command's own upstream calls is its business (POST /v1/take).

With --config (the policy file serve takes) every claim is gated by the
connector's limiter policies, read from the rate state --state names (as
serve's, shared with the fleet): a connector without capacity has its due
jobs moved to when capacity returns instead of claimed, and an in-process
handler's Run.Call is paced by those policies.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			if execCmd == "" || len(types) == 0 {
				return usagef("--exec and at least one --type are required")
			}
			source, err := applyEnv(c.Flags(), opts.Getenv, []envFlag{{"config", "SLUICE_CONFIG"}, {"state", "SLUICE_STATE"}})
			if err != nil {
				return err
			}
			if c.Flags().Changed("state") && config == "" {
				return usagef("--state needs --config: the policies that gate claims")
			}
			if _, _, err := parseStoreURL(source["state"], state); err != nil {
				return err
			}
			return j.with(c, func(s store.JobStore) error {
				hs := map[string]job.Handler{}
				for _, t := range types {
					hs[t] = execHandler(execCmd, opts.Stderr)
				}
				cfg := job.Config{Store: s, Handlers: hs, Concurrency: concurrency, ClaimAhead: claimAhead, LeaseTTL: leaseTTL, Holder: holder}
				if config != "" {
					lim, closeState, err := openLimiter(c.Context(), opts, config, source["state"], state)
					if err != nil {
						return err
					}
					defer closeState()
					cfg.Limiter = lim
					cfg.Gate = job.CapacityGate(lim, job.KnownPolicies(lim, job.ConnectorPolicies(s, time.Second, nil)))
				}
				w, err := job.New(cfg)
				if err != nil {
					return usagef("%s", strings.TrimPrefix(err.Error(), "job: "))
				}
				fmt.Fprintf(opts.Stderr, "worker %s running %s\n", w.Holder(), strings.Join(types, ", "))
				return w.Run(c.Context())
			})
		},
	}
	j.dbFlag(cmd)
	cmd.Flags().StringVar(&execCmd, "exec", "", "command that runs one job (sh -c)")
	cmd.Flags().StringSliceVar(&types, "type", nil, "job types to run (repeatable)")
	cmd.Flags().IntVar(&concurrency, "concurrency", 1, "jobs run at once")
	cmd.Flags().IntVar(&claimAhead, "claim-ahead", 0,
		"jobs claimed beyond --concurrency, each waiting for a slot with its lease heartbeated (0: auto, as many as the slots finish during one claim, up to 3 x --concurrency, none for jobs longer than a claim; -1: none)")
	cmd.Flags().DurationVar(&leaseTTL, "lease-ttl", 30*time.Second, "how long a claim holds a job without a heartbeat")
	cmd.Flags().StringVar(&holder, "holder", "", "this worker's name in leases and runs (default: random)")
	cmd.Flags().StringVar(&config, "config", "", "policy `file` (YAML, as serve's; env SLUICE_CONFIG): gate every claim by the connector's policies")
	cmd.Flags().StringVar(&state, "state", DefaultState,
		"rate state `URL` the policies are kept in, as serve's (env SLUICE_STATE): memory:, sqlite:PATH, redis://HOST:PORT[/DB], redis+cluster://..., postgres://...")
	return cmd
}

// openLimiter builds the limiter of a policy file over the rate state at
// raw (a --state URL), as serve does, and returns how to release it.
func openLimiter(ctx context.Context, opts *Options, config, flag, raw string) (*limiter.Limiter, func(), error) {
	lc, err := loadLive(config, "") // reload.go
	if err != nil {
		return nil, nil, err
	}
	log := slog.New(slog.NewTextHandler(opts.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	st, err := openState(ctx, flag, raw, lc.policies, time.Second, nil, log, 0)
	if err != nil {
		return nil, nil, err
	}
	lim, err := limiter.New(limiter.Config{Store: st.store, Leases: st.leases, Policies: lc.policies})
	if err != nil {
		st.close()
		return nil, nil, err
	}
	return lim, st.close, nil
}

// execHandler runs a job by an external command (see newWorkerCmd).
func execHandler(command string, stderr io.Writer) job.Handler {
	return func(ctx context.Context, run *job.Run) error {
		jb := run.Job()
		cmd := exec.CommandContext(ctx, "sh", "-c", command)
		cmd.Env = append(os.Environ(), "SLUICE_JOB_ID="+jb.ID, "SLUICE_JOB_TYPE="+jb.Type, "SLUICE_JOB_PARAMS="+string(jb.Params),
			"SLUICE_JOB_CURSOR="+run.Cursor(), "SLUICE_JOB_CATCH_UP_CURSOR="+run.CatchUpCursor(),
			"SLUICE_JOB_TOKEN="+strconv.FormatInt(run.Token(), 10))
		cmd.Stderr = stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return job.Permanent(fmt.Errorf("starting %q: %w", command, err))
		}
		var outcome error
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64*1024), store.MaxJobParams+64)
		for sc.Scan() {
			verb, rest, _ := strings.Cut(sc.Text(), " ")
			switch verb {
			case "commit", "commit-catch-up":
				var err error
				if verb == "commit" {
					err = run.Commit(ctx, rest)
				} else {
					err = run.CommitCatchUp(ctx, rest)
				}
				if err != nil && outcome == nil {
					outcome = err // a budget or a lost lease: the command should stop
				}
			case "park":
				reason, secs, _ := strings.Cut(rest, " ")
				n, _ := strconv.ParseFloat(secs, 64)
				outcome = job.Pressure(reason, time.Duration(n*float64(time.Second)), nil)
			case "gap":
				if !store.IsGapReason(rest) {
					outcome = fmt.Errorf("the command printed gap %q: want request_cap, wall_clock or retry_budget", rest)
				} else {
					outcome = &job.GapError{Reason: rest}
				}
			}
		}
		werr := cmd.Wait()
		var ee *exec.ExitError
		switch {
		case outcome != nil:
			return outcome
		case werr == nil:
			return nil
		case errors.As(werr, &ee) && ee.ExitCode() == exitPressure:
			return job.Pressure("", 0, werr)
		}
		return werr
	}
}
