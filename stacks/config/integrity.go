package config

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
)

// checkProxmoxImage refuses a malformed milner:substrate.proxmox.imageSha256
// and an explicit imageUrl without one: PVE verifies the download against
// it (download-url's checksum), and without it a swapped image boots every
// node and receives its machine config. The default factory URL has no
// digest that could be known offline: a warning naming the key.
func (c *Config) checkProxmoxImage(p *problems) {
	px := c.Substrate.Proxmox
	if px == nil {
		return
	}
	at := Key("substrate") + ".proxmox.imageSha256"
	switch sum := px.ImageSHA256; {
	case sum != "" && !sha256Hex.MatchString(sum):
		p.addf(at, "%q is not a SHA-256 digest (64 lowercase hex digits, as sha256sum prints)", sum)
	case sum == "" && !px.defaultImage:
		p.addf(at, "is required with an explicit imageUrl (sha256sum of the image); PVE checks the download against it")
	case sum == "":
		p.warnf(at, "the default image %s is downloaded without a pinned digest; set imageSha256 to its sha256sum", px.ImageURL)
	}
}

// DefaultBootImage is the image factory's metal disk image of a Talos
// version: bootImage when none is set.
func DefaultBootImage(talosVersion string) string {
	return fmt.Sprintf("https://factory.talos.dev/image/%s/%s/metal-amd64.qcow2", DefaultSchematic, talosVersion)
}

// BootSource is the source the boot media is created from: for a bootImage
// with a digest, local or remote, the verified copy `milner up` makes first
// (BootImageCache, resolved once by Load); otherwise bootImage itself. The
// libvirt provider would download a URL source straight into the pool
// with no check (terraform-provider-libvirt 0.8.3 libvirt/volume_image.go
// httpImage.Import), and reads a local file when it creates the volume,
// after the confirmation; a copy named by its digest, written only once
// its bytes matched, in a directory only the user can write, is what a
// pinned image reaches the pool from. A plain `pulumi up` without that
// copy fails on the missing file when it creates the boot media (the
// volume ignores a changed source once created).
func (lv *LibvirtConfig) BootSource() string {
	if lv.BootImageSHA256 != "" {
		return lv.bootCopy
	}
	return lv.BootImage
}

// BootImageCache is the verified local copy of a boot image of digest
// sum: <user cache dir>/milner/boot/<sum>.qcow2, named by its content, so a
// copy is never reused for another image. The user cache directory is
// $XDG_CACHE_HOME or ~/.cache (os.UserCacheDir); without one there is no
// place only the user can write, and no shared directory (/tmp) stands in
// for it: another user could own it, or the copy in it, between milner's
// check and the provider's read.
func BootImageCache(sum string) (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no user cache directory for the verified copy of the boot image (%w): set XDG_CACHE_HOME or HOME", err)
	}
	return filepath.Join(dir, "milner", "boot", sum+".qcow2"), nil
}

// Local reports whether the libvirt URI names no host (qemu:///system,
// qemu:///session, qemu+unix:///system): the pool's files are then on the
// machine milner and the program run on, where a volume's file can be
// looked up by its path (its key) and told from one recreated there
// (internal/fileid). A URI with a host, loopback included (a port
// forwarded to another machine looks the same), is not: its files are
// not looked up.
func (lv *LibvirtConfig) Local() bool {
	u, err := url.Parse(lv.URI)
	return err == nil && u.Host == ""
}
