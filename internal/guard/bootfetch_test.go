package guard

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestCopyBootImage: over TLS, a download whose digest matches becomes
// the verified copy and is not fetched again; one that does not match is
// refused naming the key, and leaves no file; an altered copy is refused.
func TestCopyBootImage(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte("talos"))
	}))
	defer srv.Close()
	dir := t.TempDir()
	good := "216016a8050f7df7d7302341465e5746c918aeea1e49c8cab4708e5a2159f383" // sha256 of "talos"
	dst := filepath.Join(dir, "boot", good+".qcow2")

	if err := CopyBootImage(context.Background(), srv.Client(), srv.URL+"/metal.qcow2", good, dst); err != nil {
		t.Fatalf("right digest: %v", err)
	}
	if b, err := os.ReadFile(dst); err != nil || string(b) != "talos" {
		t.Fatalf("verified copy: %q, %v", b, err)
	}
	if err := CopyBootImage(context.Background(), srv.Client(), srv.URL+"/metal.qcow2", good, dst); err != nil || hits.Load() != 1 {
		t.Errorf("second fetch: %v, %d downloads (want the copy reused)", err, hits.Load())
	}

	wrong := strings.Repeat("0", 64)
	other := filepath.Join(dir, "boot", wrong+".qcow2")
	err := CopyBootImage(context.Background(), srv.Client(), srv.URL+"/metal.qcow2", wrong, other)
	if err == nil || !strings.Contains(err.Error(), "milner:substrate.libvirt.bootImageSha256 is "+wrong) {
		t.Errorf("wrong digest: err = %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "boot", "*")); len(left) != 1 {
		t.Errorf("files after a refused download: %v, want only the verified copy", left)
	}

	if err := os.WriteFile(dst, []byte("evil"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CopyBootImage(context.Background(), srv.Client(), srv.URL+"/metal.qcow2", good, dst); err == nil || !strings.Contains(err.Error(), "altered") {
		t.Errorf("altered copy: err = %v", err)
	}
}

// A local image is copied as it was hashed: the provider reads the copy,
// so a file changed after the check (after the preview, before the
// confirmed apply) never reaches the pool.
func TestLocalBootImageIsCopiedAsHashed(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "talos.qcow2")
	if err := os.WriteFile(src, []byte("talos"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := "216016a8050f7df7d7302341465e5746c918aeea1e49c8cab4708e5a2159f383"
	dst := filepath.Join(dir, "cache", good+".qcow2")
	if err := CopyBootImage(context.Background(), nil, src, good, dst); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, []byte("evil"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(dst); err != nil || string(b) != "talos" {
		t.Errorf("the copy the provider reads: %q, %v (want the bytes that were hashed)", b, err)
	}
	wrong := strings.Repeat("0", 64)
	if err := CopyBootImage(context.Background(), nil, src, wrong, filepath.Join(dir, "cache", wrong+".qcow2")); err == nil || !strings.Contains(err.Error(), "bootImageSha256 is "+wrong) {
		t.Errorf("a changed local image under a corrected digest: err = %v, want the mismatch", err)
	}
}

// The first interrupt cancels the command's context: a download in flight
// stops with it instead of running to its end.
func TestBootImageDownloadStopsWithTheContext(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ta"))
		w.(http.Flusher).Flush()
		close(started)
		select { // a large image, still coming
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	done := make(chan error, 1)
	go func() {
		done <- CopyBootImage(ctx, srv.Client(), srv.URL+"/metal.qcow2", strings.Repeat("0", 64), filepath.Join(t.TempDir(), "milner", "boot", "x.qcow2"))
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the download went on after its context was cancelled")
	}
}

// TestBootImageCopyDirectoryIsPrivate: the verified copy lives in
// <cache>/milner/boot, the user's own and 0700 (made so, kept so); a cache
// directory others can write to, a directory of another user or a link in
// its place, and a copy that is not a regular file are refused before
// anything is read or written.
func TestBootImageCopyDirectoryIsPrivate(t *testing.T) {
	const sum = "216016a8050f7df7d7302341465e5746c918aeea1e49c8cab4708e5a2159f383" // sha256 of "talos"
	image := filepath.Join(t.TempDir(), "metal.raw")
	if err := os.WriteFile(image, []byte("talos"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		setup  func(t *testing.T, cache string)
		refuse string // "" copies
	}{
		{"a fresh cache", func(*testing.T, string) {}, ""},
		{"milner's directory too open: kept 0700", func(t *testing.T, cache string) {
			mkdir(t, filepath.Join(cache, "milner"), 0o755)
		}, ""},
		{"a cache directory anyone can write", func(t *testing.T, cache string) { chmod(t, cache, 0o777) }, "is writable by others"},
		{"a shared sticky cache directory", func(t *testing.T, cache string) { chmod(t, cache, 0o777|os.ModeSticky) }, "is writable by others"},
		{"milner's directory a link", func(t *testing.T, cache string) {
			if err := os.Symlink(t.TempDir(), filepath.Join(cache, "milner")); err != nil {
				t.Fatal(err)
			}
		}, "is not a directory (a link or a file)"},
		{"milner's directory another user's", func(t *testing.T, cache string) {
			d := filepath.Join(cache, "milner")
			mkdir(t, d, 0o700)
			if os.Getuid() != 0 {
				t.Skip("chown needs root")
			}
			if err := os.Chown(d, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}, "is owned by uid 65534"},
		{"the copy a link", func(t *testing.T, cache string) {
			mkdir(t, filepath.Join(cache, "milner"), 0o700)
			mkdir(t, filepath.Join(cache, "milner", "boot"), 0o700)
			if err := os.Symlink(image, filepath.Join(cache, "milner", "boot", sum+".qcow2")); err != nil {
				t.Fatal(err)
			}
		}, "is not a regular file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cache := filepath.Join(t.TempDir(), "cache")
			mkdir(t, cache, 0o700)
			c.setup(t, cache)
			dst := filepath.Join(cache, "milner", "boot", sum+".qcow2")
			err := CopyBootImage(context.Background(), http.DefaultClient, image, sum, dst)
			if c.refuse != "" {
				if err == nil || !strings.Contains(err.Error(), c.refuse) {
					t.Fatalf("err = %v, want %q", err, c.refuse)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range []string{filepath.Join(cache, "milner"), filepath.Join(cache, "milner", "boot")} {
				if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
					t.Errorf("%s: %v, %v; want 0700", d, fi.Mode().Perm(), err)
				}
			}
		})
	}
}

func mkdir(t *testing.T, d string, mode os.FileMode) {
	t.Helper()
	if err := os.Mkdir(d, mode); err != nil {
		t.Fatal(err)
	}
	chmod(t, d, mode)
}

func chmod(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}
