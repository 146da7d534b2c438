//go:build unix

package lease_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/lease"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/sqlitestore"
)

const childEnv = "SLUICE_LEASE_CHILD_DB"

// TestFrozenProcessCannotWrite is the fencing scenario with a real process:
// a child holds a lease (TTL 2 s) on a SQLite file and is frozen with
// SIGSTOP for 5 s; the parent acquires and writes; the child resumes, and
// its keep-alive reports the lease lost, its fenced write is refused and
// its release frees nothing.
func TestFrozenProcessCannotWrite(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		t.Skip("in the child")
	}
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "leases.db")
	s, err := sqlitestore.Open(ctx, path, sqlitestore.Config{})
	require.NoError(t, err)
	defer s.Close()

	cmd := exec.Command(os.Args[0], "-test.run=^TestFrozenChild$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+path)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	lines := bufio.NewScanner(out)
	next := func(prefix string) string {
		t.Helper()
		for lines.Scan() {
			if v, ok := strings.CutPrefix(lines.Text(), prefix); ok {
				return v
			}
		}
		t.Fatalf("child ended before %q: %v", prefix, lines.Err())
		return ""
	}
	childToken, err := strconv.ParseInt(next("acquired "), 10, 64)
	require.NoError(t, err)

	require.NoError(t, cmd.Process.Signal(syscall.SIGSTOP))
	frozen := time.Now()
	l, err := lease.New(lease.Config{Store: s})
	require.NoError(t, err)
	p := lease.Params{Name: "job", Key: "j", Permits: 1, TTL: 2 * time.Second, Holder: "parent"}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	mine, err := l.AcquireWait(wctx, p) // the child's lease runs out after 2 s
	require.NoError(t, err)
	defer mine.Release(ctx)
	require.Greater(t, mine.Token(), childToken)
	require.NoError(t, mine.Write(ctx, "data", []byte("parent")))
	// Keep the child frozen for 5 s in all.
	time.Sleep(time.Until(frozen.Add(5 * time.Second)))
	require.NoError(t, cmd.Process.Signal(syscall.SIGCONT))

	require.Equal(t, "lease: lost", next("context "), "the keep-alive noticed")
	_, err = fmt.Fprintln(stdin, "resume")
	require.NoError(t, err)
	require.Equal(t, "store: stale fencing token", next("write "))
	require.Equal(t, "store: lease not held", next("release "))

	hs, err := s.Holders(ctx, store.HoldersParams{Name: "job", Key: "j"})
	require.NoError(t, err)
	require.Len(t, hs, 1)
	require.Equal(t, "parent", hs[0].Holder, "the parent's permit is untouched")
	v, ok, err := s.FencedRead(ctx, store.FencedReadParams{Name: "job", Key: "j", Field: "data"})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "parent", string(v.Value))
	require.NoError(t, mine.Context().Err(), "the parent still holds its lease")
}

// TestFrozenChild is the child of TestFrozenProcessCannotWrite.
func TestFrozenChild(t *testing.T) {
	path := os.Getenv(childEnv)
	if path == "" {
		t.Skip("run by TestFrozenProcessCannotWrite")
	}
	ctx := context.Background()
	s, err := sqlitestore.Open(ctx, path, sqlitestore.Config{})
	require.NoError(t, err)
	defer s.Close()
	l, err := lease.New(lease.Config{Store: s})
	require.NoError(t, err)
	mine, _, err := l.Acquire(ctx, lease.Params{Name: "job", Key: "j", Permits: 1, TTL: 2 * time.Second, Holder: "child"})
	require.NoError(t, err)
	require.NotNil(t, mine)
	fmt.Printf("acquired %d\n", mine.Token())
	<-mine.Context().Done() // frozen meanwhile; then the first renewal fails
	fmt.Printf("context %v\n", context.Cause(mine.Context()))
	in := bufio.NewScanner(os.Stdin)
	in.Scan()
	err = mine.Write(ctx, "data", []byte("child"))
	fmt.Printf("write %v\n", errOrOK(err))
	err = mine.Release(ctx)
	fmt.Printf("release %v\n", errOrOK(err))
}

func errOrOK(err error) string {
	if err == nil {
		return "ok"
	}
	if errors.Is(err, store.ErrStaleToken) || errors.Is(err, store.ErrLeaseNotHeld) {
		return err.Error()
	}
	return "unexpected: " + err.Error()
}
