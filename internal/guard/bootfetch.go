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
	"syscall"
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
	if err := privateCopyDir(dst); err != nil {
		return fmt.Errorf("boot image: %w", err)
	}
	if fi, err := os.Lstat(dst); err == nil {
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("boot image: the verified copy %s is not a regular file: remove it and run again", dst)
		}
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

// privateCopyDir makes the directories of the verified copy dst
// (<user cache dir>/milner/boot) the user's own and 0700, creating them
// 0700 and keeping them so, and refuses them, or the user cache directory
// above them, when someone else could replace what is in them between
// milner's check of the copy and the provider's read of it: a directory
// of another user (root's excepted, above them), a link where milner's
// own directory should be, a cache directory others can write to (a
// shared /tmp among them, sticky or not: whoever comes first makes the
// directory).
func privateCopyDir(dst string) error {
	boot := filepath.Dir(dst)
	milner := filepath.Dir(boot)
	root := filepath.Dir(milner)
	if err := os.MkdirAll(root, 0o700); err != nil {
		return err
	}
	uid := os.Getuid()
	fi, err := os.Stat(root)
	if err != nil {
		return err
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	switch {
	case st != nil && int(st.Uid) != uid && st.Uid != 0:
		return fmt.Errorf("the cache directory %s is owned by uid %d, not by the user running milner (uid %d): set XDG_CACHE_HOME to a directory of your own", root, st.Uid, uid)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("the cache directory %s is writable by others (mode %04o): set XDG_CACHE_HOME to a directory of your own, or chmod go-w %s", root, fi.Mode().Perm(), root)
	}
	for _, d := range []string{milner, boot} {
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		fi, err := os.Lstat(d)
		if err != nil {
			return err
		}
		st, _ := fi.Sys().(*syscall.Stat_t)
		switch {
		case !fi.IsDir():
			return fmt.Errorf("%s is not a directory (a link or a file): remove it; milner keeps the verified boot image copies in a directory of its own", d)
		case st != nil && int(st.Uid) != uid:
			return fmt.Errorf("%s is owned by uid %d, not by the user running milner (uid %d): remove it; milner keeps the verified boot image copies in a directory of its own", d, st.Uid, uid)
		case fi.Mode().Perm() != 0o700:
			if err := os.Chmod(d, 0o700); err != nil {
				return err
			}
		}
	}
	return nil
}
