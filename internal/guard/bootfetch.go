package guard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

// CopyBootImage makes dst a verified, content-addressed copy of the boot
// image src (an http(s) URL or a local path) with SHA-256 digest wantHex:
// a dst already there is verified again; otherwise src is read once,
// hashed on the way into a file next to dst, and renamed into place only
// when the digest matches. A mismatch leaves nothing behind. The boot media
// is then created from dst (config.LibvirtConfig.BootSource), never from
// src: the provider reads its source after the confirmation, and a file
// hashed at preview could have changed by then. ctx ends a download (the
// first interrupt cancels it).
func CopyBootImage(ctx context.Context, client *http.Client, src, wantHex, dst string) error {
	if _, err := os.Stat(dst); err == nil {
		if err := VerifyBootImage(dst, wantHex); err != nil {
			return fmt.Errorf("%w (the verified copy of %s was altered: remove it and run again)", err, src)
		}
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("boot image: %w", err)
	}
	body, err := openBootImage(ctx, client, src)
	if err != nil {
		return err
	}
	defer func() { _ = body.Close() }()
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return fmt.Errorf("boot image: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".copy-*")
	if err != nil {
		return fmt.Errorf("boot image: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // after the rename: nothing
	got, err := digest(tmp, body)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// A cancel can reach the transport as the end of the body: the
		// copy then ends short, and the command was interrupted anyway.
		err = ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("boot image %s: %w", src, err)
	}
	if got != wantHex {
		return fmt.Errorf("boot image %s has sha256 %s, but milner:substrate.libvirt.bootImageSha256 is %s: the image or the digest is wrong; nothing was applied", src, got, wantHex)
	}
	return os.Rename(tmp.Name(), dst)
}

// openBootImage opens a boot image for reading: a download for a URL, the
// file for a path.
func openBootImage(ctx context.Context, client *http.Client, src string) (io.ReadCloser, error) {
	if !strings.Contains(src, "://") {
		f, err := os.Open(src)
		if err != nil {
			return nil, fmt.Errorf("boot image: %w", err)
		}
		return f, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, src, nil)
	if err != nil {
		return nil, fmt.Errorf("boot image %s: %w", src, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("boot image %s: %w", src, err)
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("boot image %s: %s", src, resp.Status)
	}
	return resp.Body, nil
}
