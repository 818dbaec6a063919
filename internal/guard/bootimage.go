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
	got, err := digest(io.Discard, f)
	if err != nil {
		return fmt.Errorf("boot image %s: %w", path, err)
	}
	if got != wantHex {
		return fmt.Errorf("boot image %s has sha256 %s, but milner:substrate.libvirt.bootImageSha256 is %s; replace the file or fix the digest; nothing was applied", path, got, wantHex)
	}
	return nil
}

// digest copies r to w and returns the hex SHA-256 of what it copied.
func digest(w io.Writer, r io.Reader) (string, error) {
	h := sha256.New()
	_, err := io.Copy(io.MultiWriter(w, h), r)
	return hex.EncodeToString(h.Sum(nil)), err
}
