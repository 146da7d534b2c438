package cli

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluicerl/sluice/auth"
)

func newTokenCmd(opts *Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Mint API tokens and their hash lines",
		Args:  usageArgs(noSubcommand),
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	var name, scopes string
	create := &cobra.Command{
		Use:   "create --name NAME --scopes SCOPES",
		Short: "Mint a token and print it and its token-file line",
		Long: `Mint a token (256 random bits) and print two lines on stdout: the token,
to give to the client (it is shown only once and never stored), and the
line to add to the --tokens file (or, as name/scopes/sha256, to the auth
section of the policy file), which holds only its SHA-256.

Scopes: read, take, lease, slots, jobs, admin, comma-separated, or * for all.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			sc, err := tokenFlags(c, name, scopes)
			if err != nil {
				return err
			}
			tok := auth.NewToken()
			fmt.Fprintln(opts.Stdout, tok)
			fmt.Fprintln(opts.Stdout, auth.Line(name, sc, tok))
			if isTerminal(opts.Stdout) {
				fmt.Fprintln(opts.Stderr, "First line: the token, for the client; it is not stored anywhere. Second line: for the --tokens file.")
			}
			return nil
		},
	}
	hash := &cobra.Command{
		Use:   "hash --name NAME --scopes SCOPES < TOKEN",
		Short: "Print the token-file line of a token read from stdin",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			sc, err := tokenFlags(c, name, scopes)
			if err != nil {
				return err
			}
			line, err := bufio.NewReader(io.LimitReader(os.Stdin, 4096)).ReadString('\n')
			tok := strings.TrimSpace(line)
			if tok == "" {
				if err != nil && err != io.EOF {
					return fmt.Errorf("read the token from stdin: %w", err)
				}
				return usagef("no token on stdin")
			}
			fmt.Fprintln(opts.Stdout, auth.Line(name, sc, tok))
			return nil
		},
	}
	for _, c := range []*cobra.Command{create, hash} {
		c.Flags().StringVar(&name, "name", "", "the token's `name` (letters, digits, '.', '_', '-'; names the caller in logs and binds its leases)")
		c.Flags().StringVar(&scopes, "scopes", "", "comma-separated `scopes`: read, take, lease, slots, jobs, admin, or *")
	}
	cmd.AddCommand(create, hash)
	return cmd
}

func tokenFlags(c *cobra.Command, name, scopes string) (auth.Scope, error) {
	if err := requireFlags(c, "name", "scopes"); err != nil {
		return 0, err
	}
	if _, err := auth.New([]auth.Spec{{Name: name, Scopes: auth.All, SHA256: auth.Hash("")}}); err != nil {
		return 0, usagef("invalid --name: %v", strings.TrimPrefix(err.Error(), "auth: "))
	}
	sc, err := auth.ParseScopes(scopes)
	if err != nil {
		return 0, usagef("invalid --scopes %q: %v", scopes, strings.TrimPrefix(err.Error(), "auth: "))
	}
	return sc, nil
}
