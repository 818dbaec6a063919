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
		done <- CopyBootImage(ctx, srv.Client(), srv.URL+"/metal.qcow2", strings.Repeat("0", 64), filepath.Join(t.TempDir(), "x.qcow2"))
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
