package redact

import (
	"errors"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// hold is how long a chunk's last word waits for the rest of it: a URL
// written in two pieces is masked whole, and a prompt still shows at once.
const hold = 50 * time.Millisecond

// Stdio routes what this process writes to its stdout and stderr
// (file descriptors 1 and 2: Milner's own prints, the engine's, every
// library's) through Text on the way to where they went before.
// flush restores both and waits, at most a second, for what was written
// to arrive.
func Stdio() (flush func(), err error) {
	var done []func()
	for _, fd := range []int{1, 2} {
		f, err := redactFD(fd)
		if err != nil {
			for _, d := range done {
				d()
			}
			return nil, err
		}
		done = append(done, f)
	}
	return func() {
		for _, d := range done {
			d()
		}
	}, nil
}

// redactFD puts a pipe in place of fd and copies what arrives on it,
// masked, to fd's former file; restore puts that file back and drains.
// The copy of the former file is close-on-exec: a child (every plugin the
// engine starts) inherits fd, the pipe, never the file behind it. A
// plugin outliving a killed milner would otherwise hold the terminal, or
// the caller's pipe, open.
func redactFD(fd int) (restore func(), err error) {
	orig, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		_ = syscall.Close(orig)
		return nil, err
	}
	if err := syscall.Dup3(int(w.Fd()), fd, 0); err != nil {
		_ = syscall.Close(orig)
		_ = r.Close()
		_ = w.Close()
		return nil, err
	}
	_ = w.Close() // fd is the write end now
	out := os.NewFile(uintptr(orig), "stdio")
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		copyMasked(out, r)
	}()
	return sync.OnceFunc(func() {
		_ = syscall.Dup3(orig, fd, 0) // closes the pipe's last write end: EOF
		select {
		case <-drained:
		case <-time.After(time.Second): // a child still holding the pipe
		}
	}), nil
}

// copyMasked copies r to w through Text until r ends. A chunk is
// written up to its last blank; the word after it waits for the next
// chunk, or hold, whichever comes first.
func copyMasked(w io.Writer, r *os.File) {
	buf := make([]byte, 64<<10)
	var pending string
	for {
		if pending != "" {
			_ = r.SetReadDeadline(time.Now().Add(hold))
		} else {
			_ = r.SetReadDeadline(time.Time{})
		}
		n, err := r.Read(buf)
		pending += string(buf[:n])
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			_, _ = io.WriteString(w, Text(pending))
			pending = ""
			continue
		case err != nil:
			_, _ = io.WriteString(w, Text(pending))
			return
		}
		if i := strings.LastIndexAny(pending, " \t\r\n"); i >= 0 {
			_, _ = io.WriteString(w, Text(pending[:i+1]))
			pending = pending[i+1:]
		}
	}
}
