//go:build !unix

package bench

import "time"

// processCPU returns 0: CPU time is not measured on this platform.
func processCPU() time.Duration { return 0 }
