// Package lease holds N-permit leases with fencing tokens over any
// store.LeaseStore: Acquire never blocks, AcquireWait blocks until a permit
// frees (woken by the store's release announcements where it has them,
// else by a jittered back-off from 10ms to 1s bounded by the first
// holder's expiry, never by a tight polling loop), and every held Lease
// keeps itself alive, renewing at a fraction of its TTL, and cancels its
// Context the moment it is lost.
//
// A lease that expires while its holder still works is how distributed
// locks lose data. Guard every write a lease protects with its fencing
// token: Lease.Write for small values kept by the store, or the store's
// helper for your own SQL (pgstore.Fence), so that a holder that was
// frozen past its TTL cannot commit.
package lease
