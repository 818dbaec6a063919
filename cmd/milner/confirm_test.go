package main

import (
	"bytes"
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/internal/pipeline"
	"github.com/milner/milner/tests/ptytest"
)

// openPTY opens a pseudo-terminal pair: what the user types is written to
// master, confirm reads the terminal end.
func openPTY(t *testing.T) (master, tty *os.File) { return ptytest.Open(t) }

// TestConfirmIsTheWholeLine: the typed line is compared whole; a line
// that starts with the stack name is not the stack name.
func TestConfirmIsTheWholeLine(t *testing.T) {
	for _, tc := range []struct {
		typed string
		ok    bool
	}{
		{"dev\n", true},
		{"  dev \n", true},         // surrounding blanks are not a word
		{"dev prod\n", false},      // Fscanln would have read "dev"
		{"dev\tand-more\n", false}, // any separator
	} {
		t.Run(tc.typed, func(t *testing.T) {
			master, tty := openPTY(t)
			_, err := master.WriteString(tc.typed)
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err = confirm(ctx, tty, &bytes.Buffer{}, "Apply?", "dev")
			if tc.ok {
				assert.NoError(t, err)
				return
			}
			var ref *refusal
			require.ErrorAs(t, err, &ref)
			assert.Contains(t, err.Error(), "not confirmed")
		})
	}
}

// TestSIGHUPInterrupts: a hang-up is handled as SIGINT and SIGTERM are
// (the first cancels gracefully); unhandled, it would kill the process.
func TestSIGHUPInterrupts(t *testing.T) {
	var stderr bytes.Buffer
	in := watchInterrupts(context.Background(), &stderr, func(int) {})
	defer in.stop()
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	select {
	case <-in.ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("SIGHUP did not cancel the command's context")
	}
	assert.True(t, in.interrupted())
}

// TestSecondSignalOutsideAnEngineOperationExits: the second signal
// terminates an engine operation in flight; outside one nothing listens to
// terminate, so the command stops at once with pipeline.ExitCancelled.
func TestSecondSignalOutsideAnEngineOperationExits(t *testing.T) {
	twice := func(t *testing.T, held bool) (exited chan int, in *interrupt) {
		var stderr bytes.Buffer
		exited = make(chan int, 1)
		in = watchInterrupts(context.Background(), &stderr, func(code int) { exited <- code })
		t.Cleanup(in.stop)
		if held {
			t.Cleanup(in.Operation())
		}
		require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGINT))
		<-in.ctx.Done()
		require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGINT))
		select {
		case <-in.Terminate():
		case <-time.After(10 * time.Second):
			t.Fatal("the second signal did not close terminate")
		}
		return exited, in
	}
	t.Run("outside an engine operation", func(t *testing.T) {
		exited, _ := twice(t, false)
		select {
		case code := <-exited:
			assert.Equal(t, pipeline.ExitCancelled, code)
		case <-time.After(10 * time.Second):
			t.Fatal("the second signal outside an engine operation did not stop the command")
		}
	})
	t.Run("during an engine operation", func(t *testing.T) {
		exited, _ := twice(t, true)
		select {
		case code := <-exited:
			t.Fatalf("exited %d while the engine operation could still terminate and save the state", code)
		case <-time.After(200 * time.Millisecond):
		}
	})
}
