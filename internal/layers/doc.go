// Package layers holds the test that enforces Sluice's import rules (see
// CONTRIBUTING.md): dependencies point down the layers only, and the pure
// algorithm packages import nothing but the standard library.
package layers
