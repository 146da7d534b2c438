// Package blackbox holds the black-box test of `sluice serve` over a shared
// store: it builds the binary, runs three server processes over Redis and
// over PostgreSQL while extra busy processes saturate the CPU, drives
// concurrent HTTP load at one policy per outage mode, and checks every
// allowed answer against the policy from the client side, with the store
// healthy and across a real outage (a redis-server the test starts on its
// own port, killed and restarted; PostgreSQL behind a fault proxy that
// resets every connection). With -blackbox.figures it prints the table of
// admitted/ideal and excess per store, mode and machine load.
package blackbox
