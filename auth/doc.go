// Package auth authenticates the callers of Sluice's server: bearer
// tokens, stored hashed, each granting a set of scopes.
//
// # Tokens
//
// A token is "sluice_" followed by 43 characters of unpadded base64url:
// 256 random bits (NewToken mints one; the CLI's "sluice token create"
// prints one with its hash line). The server never stores or logs a
// token, only its SHA-256: a token is so long and random that a fast hash
// is enough (no salt, no slow KDF), and a leaked file of hashes grants
// nothing. A presented token is hashed and compared with every configured
// hash in constant time (crypto/subtle), without stopping at a match, so
// neither the time taken nor the order of the file tells which
// comparison matched.
//
// # Scopes
//
// Every route of the server needs exactly one Scope, and a token holds a
// set of them:
//
//	read   GET listings: policies, lease holders, slots, slot configs, jobs, runs, gaps
//	take   POST /v1/take (rate decisions)
//	lease  acquire, renew and release leases
//	slots  book slots (POST /api/v1/slots, /api/v1/slots/batch)
//	jobs   the worker protocol: claim, heartbeat, commit, park, finish
//	admin  policy and config changes: reload, slot configs, connectors and jobs
//	*      every scope above
//
// No scope implies another: a worker that takes and reads needs
// "take,read". Public marks the routes that need no token at all
// (/healthz and /metrics, which carry no keys and no secrets); it cannot
// be granted.
//
// # Where tokens come from
//
// A token file (ParseFile), one token per line:
//
//	# name      scopes        hash
//	ci-worker   take,lease    sha256:5d41402abc4b2a76b9719d911017c592...
//	ops         *             sha256:...
//
// or an "auth" section of the policy file (ParseConfig):
//
//	auth:
//	  tokens:
//	    - name: ci-worker
//	      scopes: [take, lease]
//	      sha256: 5d41402abc4b2a76b9719d911017c592...
//
// Names are 1 to 64 bytes of letters, digits, '.', '_' and '-'; they name
// the caller in logs and bind its leases (see server), and must be unique.
//
// # Using it
//
// Tokens is an immutable set; Keyring holds the current one and swaps it
// atomically on reload, so a request sees the old set or the new one,
// never a mix. Keyring.Authenticate reads an Authorization header value;
// UnaryServerInterceptor and StreamServerInterceptor do the same for gRPC
// from the "authorization" metadata.
package auth
