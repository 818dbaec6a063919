package guard

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestVerifyBootImage(t *testing.T) {
	f := filepath.Join(t.TempDir(), "boot.qcow2")
	if err := os.WriteFile(f, []byte("talos"), 0o644); err != nil {
		t.Fatal(err)
	}
	// sha256sum of the bytes "talos".
	if err := VerifyBootImage(f, "216016a8050f7df7d7302341465e5746c918aeea1e49c8cab4708e5a2159f383"); err != nil {
		t.Errorf("right digest: %v", err)
	}
	wrong := strings.Repeat("0", 64)
	if err := VerifyBootImage(f, wrong); err == nil || !strings.Contains(err.Error(), "milner:substrate.libvirt.bootImageSha256 is "+wrong) {
		t.Errorf("wrong digest: err = %v", err)
	}
}
