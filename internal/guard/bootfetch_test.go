package guard

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// TestFetchBootImage: over TLS, a download whose digest matches becomes
// the verified copy and is not fetched again; one that does not match is
// refused naming the key, and leaves no file; an altered copy is refused.
func TestFetchBootImage(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte("talos"))
	}))
	defer srv.Close()
	dir := t.TempDir()
	good := "216016a8050f7df7d7302341465e5746c918aeea1e49c8cab4708e5a2159f383" // sha256 of "talos"
	dst := filepath.Join(dir, "boot", good+".qcow2")

	if err := FetchBootImage(srv.Client(), srv.URL+"/metal.qcow2", good, dst); err != nil {
		t.Fatalf("right digest: %v", err)
	}
	if b, err := os.ReadFile(dst); err != nil || string(b) != "talos" {
		t.Fatalf("verified copy: %q, %v", b, err)
	}
	if err := FetchBootImage(srv.Client(), srv.URL+"/metal.qcow2", good, dst); err != nil || hits.Load() != 1 {
		t.Errorf("second fetch: %v, %d downloads (want the copy reused)", err, hits.Load())
	}

	wrong := strings.Repeat("0", 64)
	other := filepath.Join(dir, "boot", wrong+".qcow2")
	err := FetchBootImage(srv.Client(), srv.URL+"/metal.qcow2", wrong, other)
	if err == nil || !strings.Contains(err.Error(), "milner:substrate.libvirt.bootImageSha256 is "+wrong) {
		t.Errorf("wrong digest: err = %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "boot", "*")); len(left) != 1 {
		t.Errorf("files after a refused download: %v, want only the verified copy", left)
	}

	if err := os.WriteFile(dst, []byte("evil"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := FetchBootImage(srv.Client(), srv.URL+"/metal.qcow2", good, dst); err == nil || !strings.Contains(err.Error(), "altered") {
		t.Errorf("altered copy: err = %v", err)
	}
}
