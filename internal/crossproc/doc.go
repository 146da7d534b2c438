// Package crossproc holds the integration test that shares one limit
// between several OS processes through a shared store (Redis, PostgreSQL)
// and checks that the fleet, together, never admits more than the limit
// allows and admits nearly all of it under load.
package crossproc
