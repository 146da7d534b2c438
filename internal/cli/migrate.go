package cli

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluicerl/sluice/store/migration"
)

// openRecords opens the records database named by a --db URL and applies
// pending migrations. Close the Migrator to release the database.
func openRecords(ctx context.Context, flag, raw string) (*migration.Migrator, error) {
	m, err := openMigrator(ctx, flag, raw)
	if err != nil {
		return nil, err
	}
	if _, err := m.Up(ctx); err != nil {
		_ = m.Close()
		return nil, fmt.Errorf("%s: migrate: %w", flag, err)
	}
	return m, nil
}

func openMigrator(ctx context.Context, flag, raw string) (*migration.Migrator, error) {
	if _, _, err := parseDBURL(flag, raw); err != nil {
		return nil, err
	}
	m, err := migration.Open(ctx, raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	return m, nil
}

// redactURL hides a password in a URL for logs.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	return u.Redacted()
}

func newMigrateCmd(opts *Options) *cobra.Command {
	var dbURL string
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply, roll back or list the database migrations",
		Long: `Apply, roll back or list the schema migrations of a Sluice database
(SQLite or PostgreSQL). Migrations are embedded in the binary and applied
under a lock, so several processes may run them at once. 'sluice serve'
applies pending migrations by itself; these commands are for operators who
prefer to do it explicitly.`,
	}
	cmd.PersistentFlags().StringVar(&dbURL, "db", DefaultDB, "database `URL` (env SLUICE_DB): sqlite:PATH or postgres://...")
	// withMigrator opens the database for one subcommand and runs f on it.
	// Only up may create the database.
	withMigrator := func(c *cobra.Command, f func(*migration.Migrator) error) error {
		source, err := applyEnv(c.Flags(), opts.Getenv, []envFlag{{"db", "SLUICE_DB"}})
		if err != nil {
			return err
		}
		if c.Name() != "up" {
			if err := requireDB(source["db"], dbURL); err != nil {
				return err
			}
		}
		m, err := openMigrator(c.Context(), source["db"], dbURL)
		if err != nil {
			return err
		}
		defer m.Close()
		return f(m)
	}
	print := func(steps []migration.Step) {
		if len(steps) == 0 {
			fmt.Fprintln(opts.Stdout, "nothing to do: the schema is current")
		}
		for _, s := range steps {
			fmt.Fprintf(opts.Stdout, "%s %04d %s\n", s.Direction, s.Version, s.Name)
		}
	}
	up := &cobra.Command{
		Use:   "up",
		Short: "Apply every pending migration",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			return withMigrator(c, func(m *migration.Migrator) error {
				steps, err := m.Up(c.Context())
				print(steps)
				return err
			})
		},
	}
	down := &cobra.Command{
		Use:   "down [STEPS|all]",
		Short: "Roll back the last STEPS migrations (default 1)",
		Args:  usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			n := 1
			if len(args) == 1 {
				if strings.EqualFold(args[0], "all") {
					n = migration.AllSteps
				} else if n, _ = strconv.Atoi(args[0]); n <= 0 {
					return usagef("invalid STEPS %q: want a positive number or all", args[0])
				}
			}
			return withMigrator(c, func(m *migration.Migrator) error {
				steps, err := m.Down(c.Context(), n)
				print(steps)
				return err
			})
		},
	}
	status := &cobra.Command{
		Use:   "status",
		Short: "List every migration and whether it is applied",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			return withMigrator(c, func(m *migration.Migrator) error {
				st, err := m.Status(c.Context())
				if err != nil {
					return err
				}
				for _, s := range st {
					state := "pending"
					if s.Applied {
						state = "applied " + s.AppliedAt.UTC().Format("2006-01-02T15:04:05Z")
					}
					fmt.Fprintf(opts.Stdout, "%04d %-32s %s\n", s.Version, s.Name, state)
				}
				return nil
			})
		},
	}
	cmd.AddCommand(up, down, status)
	return cmd
}
