package redact

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCopyMaskedJoinsSplitWrites: a URL that reaches the pipe in two
// writes is masked whole, and a prompt that ends without a blank is shown
// within hold.
func TestCopyMaskedJoinsSplitWrites(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	var mu sync.Mutex
	var out bytes.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		copyMasked(lockedWriter{&mu, &out}, r)
	}()
	_, _ = w.WriteString("backend postgres://milner:s3")
	time.Sleep(hold / 5)
	_, _ = w.WriteString("cret@db/state\nType the stack name to confirm: ")
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.HasSuffix(out.String(), "confirm: ")
	}, 10*hold, hold/10, "the prompt is shown without its line's end")
	require.NoError(t, w.Close())
	<-done
	assert.Equal(t, "backend postgres://milner:xxxxx@db/state\nType the stack name to confirm: ", out.String())
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestChildrenNeverInheritTheFormerStdio: a process started after the
// redaction holds the pipe in fd's place, not the file fd held before
// (the caller's pipe or terminal): a plugin that outlives a SIGKILLed
// milner must not keep its caller waiting for EOF.
func TestChildrenNeverInheritTheFormerStdio(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer func() { _ = r.Close(); _ = w.Close() }()
	former, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(w.Fd())))
	require.NoError(t, err)
	restore, err := redactFD(int(w.Fd()))
	require.NoError(t, err)
	child := exec.Command("sleep", "30")
	require.NoError(t, child.Start())
	defer func() { _ = child.Process.Kill(); _ = child.Wait(); restore() }()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", child.Process.Pid))
	require.NoError(t, err)
	for _, fd := range fds {
		target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", child.Process.Pid, fd.Name()))
		assert.NotEqual(t, former, target, "the child holds fd %s on the former file", fd.Name())
	}
}
