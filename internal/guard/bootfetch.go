package guard

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
)

// FetchBootImage makes dst a verified copy of the remote boot image at url
// with SHA-256 digest wantHex: a dst already there is verified; otherwise
// the image is downloaded next to it, hashed on the way, and renamed into
// place only when the digest matches. A mismatch leaves nothing behind.
// The boot media is then created from dst (config.LibvirtConfig.BootSource),
// never from the URL.
func FetchBootImage(client *http.Client, url, wantHex, dst string) error {
	if _, err := os.Stat(dst); err == nil {
		if err := VerifyBootImage(dst, wantHex); err != nil {
			return fmt.Errorf("%w (the verified copy of %s was altered: remove it and run again)", err, url)
		}
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("boot image: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return fmt.Errorf("boot image: %w", err)
	}
	resp, err := client.Get(url) //nolint:noctx // a download the operation waits for
	if err != nil {
		return fmt.Errorf("boot image %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("boot image %s: %s", url, resp.Status)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".download-*")
	if err != nil {
		return fmt.Errorf("boot image: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // after the rename: nothing
	got, err := digest(tmp, resp.Body)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("boot image %s: %w", url, err)
	}
	if got != wantHex {
		return fmt.Errorf("boot image %s downloaded with sha256 %s, but milner:substrate.libvirt.bootImageSha256 is %s: the image or the digest is wrong; nothing was applied", url, got, wantHex)
	}
	return os.Rename(tmp.Name(), dst)
}
