package cli

import (
	"fmt"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicerl/sluice/auth"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/store"
)

func newPoliciesCmd(opts *Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policies",
		Short: "Work with policy files",
		Args:  usageArgs(noSubcommand),
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "check FILE",
		Short: "Validate a policy file and list its policies",
		Long: `Validate a policy file. On success, print one line per policy (name,
algorithm, rate per period, burst, shadow) and exit 0. Otherwise print
every problem as file:line:col: path: message and exit 1.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(_ *cobra.Command, args []string) error {
			policies, err := limiter.LoadFile(args[0])
			if err != nil {
				return err
			}
			// The parser validates each policy; New checks the set.
			if _, err := limiter.New(limiter.Config{Policies: policies}); err != nil {
				return err
			}
			if data, err := os.ReadFile(args[0]); err == nil {
				if _, _, err := auth.ParseConfig(args[0], data); err != nil { // the auth: section
					return err
				}
			}
			if len(policies) == 0 {
				return fmt.Errorf("%s defines no policies: a server on it would refuse every take and lease", args[0])
			}
			tw := tabwriter.NewWriter(opts.Stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tALGORITHM\tRATE\tBURST\tSHADOW")
			for _, p := range policies {
				if p.Algorithm == store.Concurrency {
					fmt.Fprintf(tw, "%s\t%s\t%d permits, ttl %s\t-\t%t\n", p.Name, p.Algorithm, p.Permits, formatPeriod(p.TTL), p.Shadow)
					continue
				}
				burst := "-"
				if p.Algorithm == store.GCRA {
					burst = strconv.FormatInt(p.Limit().Max(), 10)
				}
				fmt.Fprintf(tw, "%s\t%s\t%d/%s\t%s\t%t\n",
					p.Name, p.Algorithm, p.Rate, formatPeriod(p.Period), burst, p.Shadow)
			}
			return tw.Flush()
		},
	})
	return cmd
}

// noSubcommand rejects arguments to a command that only groups others.
func noSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
	}
	return nil
}

// formatPeriod writes a period in its largest whole unit: 1m, 10s, 24h,
// 500ms; time.Duration.String otherwise.
func formatPeriod(d time.Duration) string {
	units := []struct {
		d    time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}, {time.Microsecond, "us"}}
	for _, u := range units {
		if d >= u.d && d%u.d == 0 {
			return strconv.FormatInt(int64(d/u.d), 10) + u.name
		}
	}
	return d.String()
}
