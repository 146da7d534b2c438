// Package cli is the sluice command line, built with cobra. cmd/sluice is
// a thin main around Main; tests run the same code in-process through Run,
// with their own output writers, environment and a Ready callback that
// reports the address serve listens on.
//
// Commands:
//
//	sluice serve [--addr host:port] [--config FILE] [--profiles FILE] [--log-level L] [--log-format text|json] [--shutdown-timeout D] [--max-body SIZE]
//	sluice policies check FILE
//	sluice lease acquire|renew|release|list ... [--server URL] [--token T]
//	sluice take POLICY KEY [--cost N]                 (client.go: these four, and slots assign
//	sluice acquire KEY [--wait D] [--profile P]        --server, take --server URL, --token T
//	sluice report PERMIT --status N [--header H]...    (env SLUICE_SERVER, SLUICE_TOKEN, sent as
//	sluice leases POLICY KEY                           a bearer token) and --output json|table)
//	sluice version
//
// serve runs the HTTP API of package server until its context ends (the
// process's SIGINT or SIGTERM), then shuts down gracefully. Without a policy
// file it enforces DefaultPolicies, so `sluice serve` works with no flags.
// Every serve flag has an environment variable (SLUICE_ADDR, SLUICE_CONFIG,
// SLUICE_LOG_LEVEL, SLUICE_LOG_FORMAT, SLUICE_SHUTDOWN_TIMEOUT,
// SLUICE_MAX_BODY...); a flag given
// on the command line wins over its variable, and an invalid value is
// reported naming whichever of the two supplied it.
//
// Commands that only read a database (slots verify, migrate status and
// down) refuse a SQLite path with no file rather than create one.
//
// Exit codes: ExitOK (0), ExitFailure (1: the command failed, e.g. a policy
// file with errors, each printed as file:line:col: path: message), ExitUsage
// (2: a bad command line or environment).
package cli
