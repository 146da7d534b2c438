// Command sluice keeps fleets of workers inside the rate limits of the APIs
// they call. See package internal/cli for its commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluicerl/sluice/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
