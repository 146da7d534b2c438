package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/sluicerl/sluice/limiter"
)

// Exit codes.
const (
	ExitOK      = 0 // success
	ExitFailure = 1 // the command ran and failed (a bad policy file, a port in use)
	ExitUsage   = 2 // the command line or environment was wrong
)

// Options are what the command line reads and writes besides its
// arguments, so that tests can run it in-process. The zero value means the
// process's own: os.Stdout, os.Stderr, os.Getenv.
type Options struct {
	Stdout io.Writer
	Stderr io.Writer
	// Getenv looks up environment variables. Nil means os.Getenv.
	Getenv func(string) string
	// Ready, if set, is called by serve with the address it listens on,
	// once it accepts connections (useful with --addr 127.0.0.1:0).
	Ready func(addr net.Addr)
}

// Main runs the sluice command line with args (without the program name)
// and returns the process exit code. ctx ends serve: cancel it on SIGINT
// or SIGTERM.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return Run(ctx, args, Options{Stdout: stdout, Stderr: stderr})
}

// Run is Main with every dependency in opts.
func Run(ctx context.Context, args []string, opts Options) int {
	if opts.Stdout == nil {
		opts.Stdout = os.Stdout
	}
	if opts.Stderr == nil {
		opts.Stderr = os.Stderr
	}
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	if args == nil {
		args = []string{} // cobra reads os.Args when args is nil
	}
	root := newRoot(&opts)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	var ue usageError
	switch {
	case errors.As(err, &ue), strings.HasPrefix(err.Error(), "unknown command "):
		fmt.Fprintf(opts.Stderr, "sluice: %v\n", err)
		fmt.Fprintf(opts.Stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return ExitUsage
	}
	var ces limiter.ConfigErrors
	if errors.As(err, &ces) {
		// Compiler style, one per line in file order: file:line:col: path: message.
		ces = slices.Clone(ces)
		slices.SortStableFunc(ces, func(a, b *limiter.ConfigError) int {
			return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
		})
		for _, e := range ces {
			fmt.Fprintln(opts.Stderr, e.Error())
		}
		fmt.Fprintf(opts.Stderr, "sluice: %d %s in the policy file\n", len(ces), plural(len(ces), "error", "errors"))
		return ExitFailure
	}
	fmt.Fprintf(opts.Stderr, "sluice: %v\n", err)
	return ExitFailure
}

// usageError is an error in the command line or the environment.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// usageArgs marks the errors of an argument validator as usage errors.
func usageArgs(v cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := v(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

func newRoot(opts *Options) *cobra.Command {
	root := &cobra.Command{
		Use:   "sluice",
		Short: "Keep fleets of workers inside the rate limits of the APIs they call",
		Long: `Sluice paces calls to third-party APIs per key and across every process
that shares a credential. 'sluice serve' runs its HTTP API.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(opts.Stdout)
	root.SetErr(opts.Stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newServeCmd(opts), newPoliciesCmd(opts), newMigrateCmd(opts), newVersionCmd(opts))
	root.AddCommand(newLeaseCmd(opts))
	root.AddCommand(newSlotsCmd(opts))
	root.AddCommand(newSimCmd(opts))
	root.AddCommand(newConnectorsCmd(opts), newJobsCmd(opts), newRunsCmd(opts), newGapsCmd(opts), newWorkerCmd(opts)) // jobs.go
	root.AddCommand(newTakeCmd(opts), newAcquireCmd(opts), newReportCmd(opts), newLeasesCmd(opts))                    // client.go
	return root
}

// envFlag binds a flag to an environment variable: the variable is used
// when the flag is not given on the command line.
type envFlag struct {
	flag, env string
}

// applyEnv sets every flag not given on the command line from its
// environment variable, and returns where each flag's value came from (the
// flag or the variable) for error messages.
func applyEnv(fs *pflag.FlagSet, getenv func(string) string, binds []envFlag) (map[string]string, error) {
	source := make(map[string]string, len(binds))
	for _, b := range binds {
		source[b.flag] = "--" + b.flag
		if fs.Changed(b.flag) {
			continue
		}
		v := getenv(b.env)
		if v == "" {
			continue
		}
		if err := fs.Set(b.flag, v); err != nil {
			if cause := errors.Unwrap(err); cause != nil {
				err = cause // drop pflag's "invalid argument for flag" wording
			}
			return nil, usagef("invalid %s %q: %v", b.env, v, err)
		}
		source[b.flag] = b.env
	}
	return source, nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// requireFlags fails naming every flag of names not given on the command
// line.
func requireFlags(c *cobra.Command, names ...string) error {
	var missing []string
	for _, n := range names {
		if !c.Flags().Changed(n) {
			missing = append(missing, "--"+n)
		}
	}
	switch len(missing) {
	case 0:
		return nil
	case 1:
		return usagef("%s is required", missing[0])
	}
	return usagef("%s and %s are required", strings.Join(missing[:len(missing)-1], ", "), missing[len(missing)-1])
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
