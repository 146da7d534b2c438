package cli

import (
	"errors"

	"github.com/sluicerl/sluice/store"
)

// checkID checks an identifier given on the command line (what names it:
// "KEY", "--holder") by the identifier rule with a bound of max bytes,
// before anything is sent or opened; a bad one is a usage error.
func checkID(what, s string, max int) error {
	var ie *store.InvalidIDError
	if err := store.CheckIDMax(what, s, max); errors.As(err, &ie) {
		return usagef("invalid %s: %s (identifiers are 1 to %d bytes of UTF-8 text without control characters)", what, ie.Reason, max)
	}
	return nil
}
