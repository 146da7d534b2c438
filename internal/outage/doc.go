// Package outage holds the integration test of store outages: a fault
// proxy between Sluice and a real Redis or PostgreSQL black-holes and then
// resets the connection, and decisions must keep answering within the
// store timeout, follow each policy's outage mode, be counted, and return
// to the shared store once it heals.
package outage
