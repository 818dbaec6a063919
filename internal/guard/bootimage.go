package guard

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
)

// VerifyBootImage checks a local boot image against its configured SHA-256
// digest (milner:substrate.libvirt.bootImageSha256). terraform-provider-libvirt
// 0.8.3 copies a volume's source without any check, so this is the only one;
// `milner up` runs it before an up that creates the boot media.
func VerifyBootImage(path, wantHex string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("boot image: %w", err)
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("boot image %s: %w", path, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != wantHex {
		return fmt.Errorf("boot image %s has sha256 %s, but milner:substrate.libvirt.bootImageSha256 is %s; replace the file or fix the digest; nothing was applied", path, got, wantHex)
	}
	return nil
}
