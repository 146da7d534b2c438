package cli

import (
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sluicerl/sluice/provider"
)

func newProvidersCmd(opts *Options) *cobra.Command {
	var files []string
	load := func() (*provider.Set, error) { return provider.Load(files...) }
	cmd := &cobra.Command{
		Use:   "providers",
		Short: "List and show provider profiles",
		Long: `Provider profiles describe a third-party API's limits as data (package
provider): the built-in profiles, overridden or extended by --file.`,
		Args: usageArgs(noSubcommand),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.PersistentFlags().StringSliceVar(&files, "file", nil, "a profile YAML file overriding or adding a profile (repeatable)")
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List the profiles",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(_ *cobra.Command, _ []string) error {
			s, err := load()
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(opts.Stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tREVISION\tKEY\tLIMITS\tLEASES\tSOURCE")
			for _, n := range s.Names() {
				p, _ := s.Get(n)
				var ls, es []string
				for _, l := range p.Limits {
					ls = append(ls, l.Name)
				}
				for _, l := range p.Leases {
					es = append(es, l.Name)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, p.Revision, p.Key, dash(strings.Join(ls, ",")), dash(strings.Join(es, ",")), s.Origin(n))
			}
			return tw.Flush()
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "show NAME",
		Short: "Show one profile: its limits, leases, routes and outcomes",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(_ *cobra.Command, args []string) error {
			s, err := load()
			if err != nil {
				return err
			}
			p, ok := s.Get(args[0])
			if !ok {
				return fmt.Errorf("unknown profile %q (have %s)", args[0], strings.Join(s.Names(), ", "))
			}
			showProfile(opts, p, s.Origin(p.Name))
			return nil
		},
	})
	return cmd
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func showProfile(opts *Options, p *provider.Profile, origin string) {
	w := opts.Stdout
	fmt.Fprintf(w, "profile   %s (revision %s, from %s)\n", p.Name, p.Revision, origin)
	fmt.Fprintf(w, "key       %s\n", p.Key)
	if p.Description != "" {
		fmt.Fprintf(w, "about     %s\n", p.Description)
	}
	for _, d := range p.Docs {
		fmt.Fprintf(w, "docs      %s\n", d)
	}
	if len(p.Limits) > 0 {
		fmt.Fprintln(w, "\nlimits")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  NAME\tSCOPE\tALGORITHM\tLIMIT\tCHARGE\tRESOURCE\tSYNC")
		for _, l := range p.Limits {
			lim := fmt.Sprintf("%d %s, +%d per %s", l.Capacity, l.Unit, l.Rate, formatPeriod(l.Per))
			if l.Window > 0 {
				lim = fmt.Sprintf("%d %s per %s", l.Capacity, l.Unit, formatPeriod(l.Window))
			}
			sync := "-"
			if l.Sync != nil {
				sync = l.Sync.Source
				if l.Sync.Policy != "" {
					sync += " " + l.Sync.Policy
				}
				if l.Sync.Window > 0 {
					sync += "/" + formatPeriod(l.Sync.Window)
				}
				if l.Sync.Learn {
					sync += " (learns size and rate)"
				}
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\n", l.Name, l.Scope, l.Algorithm, lim, l.Charge, dash(l.Resource), sync)
		}
		_ = tw.Flush()
	}
	if len(p.Leases) > 0 {
		fmt.Fprintln(w, "\nleases")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  NAME\tSCOPE\tPERMITS\tTTL\tHOLD")
		for _, l := range p.Leases {
			perm := fmt.Sprint(l.Permits)
			for _, bv := range l.ByVersion {
				perm += fmt.Sprintf("; %d from API %s", bv.Permits, bv.From)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", l.Name, l.Scope, perm, formatPeriod(l.TTL), l.Hold)
		}
		_ = tw.Flush()
	}
	if len(p.Routes) > 0 {
		fmt.Fprintln(w, "\nroutes")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, r := range p.Routes {
			var cs []string
			for k, v := range r.Costs {
				cs = append(cs, fmt.Sprintf("%s=%d", k, v))
			}
			sort.Strings(cs)
			extra := ""
			if r.Resource != "" {
				extra += " resource=" + r.Resource
			}
			if r.Idempotent != nil && !*r.Idempotent {
				extra += " not idempotent"
			}
			fmt.Fprintf(tw, "  %s %s\t%s%s\n", r.Method, r.Path, strings.Join(cs, " "), extra)
		}
		_ = tw.Flush()
	}
	fmt.Fprintln(w, "\noutcomes")
	for _, o := range []struct {
		name  string
		rules []provider.Rule
	}{{"ban", p.Outcomes.Ban}, {"throttle", p.Outcomes.Throttle}, {"permanent", p.Outcomes.Permanent}, {"unknown", p.Outcomes.Unknown}} {
		if len(o.rules) == 0 {
			continue
		}
		var rs []string
		for _, r := range o.rules {
			var parts []string
			if len(r.Status) > 0 {
				parts = append(parts, strings.Trim(strings.ReplaceAll(fmt.Sprint(r.Status), " ", ","), "[]"))
			}
			if r.GraphQL != "" {
				parts = append(parts, r.GraphQL)
			}
			if r.If != "" {
				parts = append(parts, "if "+r.If)
			}
			rs = append(rs, strings.Join(parts, " "))
		}
		fmt.Fprintf(w, "  %-9s %s\n", o.name, strings.Join(rs, "; "))
	}
}
