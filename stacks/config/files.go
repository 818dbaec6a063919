package config

// Paths and URIs that choose a file on this machine (issue #49, class 8).
// The boot image is read by milner (its verified copy) and by the libvirt
// provider, as the user running them, possibly root: a bootImage of
// /etc/shadow is copied into a volume the VM boots from (and its digest
// printed when it does not match). libvirt's ssh transports read the
// known_hosts file a URI names (knownhosts=, terraform-provider-libvirt
// 0.8.3 libvirt/uri/ssh.go): one that others can write is a host key
// anyone can plant. So a local boot image is a disk image file outside the
// system and credential trees, and a known_hosts file is one only its
// owner (the user or root) can change.

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// bootImageExts are the disk image files a boot image may be: Talos
// publishes its metal image as raw (.raw, .img) and qcow2.
var bootImageExts = []string{".qcow2", ".raw", ".img"}

// secretTrees hold the system's configuration and the users' credentials:
// no file in them is a boot image.
var secretTrees = []string{"/etc", "/root", "/usr", "/boot", "/var/lib/libvirt/qemu", "/var/lib/libvirt/dnsmasq", "/var/spool", "/var/mail"}

// checkFiles is the rule of this file.
func (c *Config) checkFiles(p *problems) {
	lv := c.Substrate.Libvirt
	if lv == nil {
		return
	}
	sp := Key("substrate") + ".libvirt"
	if img := lv.BootImage; strings.HasPrefix(img, "/") && path.Clean(img) == img {
		switch {
		case !slices.Contains(bootImageExts, path.Ext(img)):
			p.addf(sp+".bootImage", "%q is not a disk image file (want %s): the provider copies the file into a volume the nodes boot from, and milner reads it to check its digest, as the user running them", img, strings.Join(bootImageExts, ", "))
		case inAny(img, secretTrees):
			p.addf(sp+".bootImage", "%q is in %s, the system's or a user's private files, not where a boot image is kept: copy the image elsewhere (e.g. /var/lib/milner/images)", img, secretTreeOf(img))
		case hiddenDir(img):
			p.addf(sp+".bootImage", "%q is in a hidden directory (a home's .ssh, .gnupg, .config hold credentials): copy the image elsewhere", img)
		}
	}
	checkKnownHostsFile(p, sp+".uri", lv.URI)
}

func secretTreeOf(p string) string {
	for _, r := range secretTrees {
		if p == r || strings.HasPrefix(p, r+"/") {
			return r
		}
	}
	return ""
}

// hiddenDir reports a directory of the path that starts with '.'.
func hiddenDir(p string) bool {
	for _, d := range strings.Split(path.Dir(p), "/") {
		if strings.HasPrefix(d, ".") {
			return true
		}
	}
	return false
}

// checkKnownHostsFile refuses a libvirt URI whose knownhosts= file (any
// case, escaped or not: libvirt reads its parameters so, viruri.c) is not
// a clean absolute path, or is, on this machine, a file or in a directory
// that someone other than the user and root can write to.
func checkKnownHostsFile(p *problems, at, uri string) {
	u, err := url.Parse(uri)
	if err != nil {
		return
	}
	for _, kv := range strings.Split(u.RawQuery, "&") {
		k, v, _ := strings.Cut(kv, "=")
		if uk, err := url.QueryUnescape(k); err == nil {
			k = uk
		}
		if !strings.EqualFold(k, "knownhosts") {
			continue
		}
		if uv, err := url.QueryUnescape(v); err == nil {
			v = uv
		}
		if !filepath.IsAbs(v) || filepath.Clean(v) != v {
			p.addf(at, "knownhosts=%q is not a clean absolute path: the provider would read it relative to wherever it runs", v)
			continue
		}
		for _, f := range []string{v, filepath.Dir(v)} {
			if why := othersCanWrite(f); why != "" {
				p.addf(at, "knownhosts=%s: %s, who could plant a host key for the hypervisor; keep it in ~/.ssh/known_hosts or a file only you and root can change", v, why)
				break
			}
		}
	}
}

// othersCanWrite says why someone other than the user running milner and
// root can change the file or directory f, or "" (also when f does not
// exist here: `milner check` may run on another machine than the up).
func othersCanWrite(f string) string {
	fi, err := os.Lstat(f)
	if err != nil {
		return ""
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		return fmt.Sprintf("%s is a symbolic link", f)
	case st != nil && int(st.Uid) != os.Getuid() && st.Uid != 0:
		return fmt.Sprintf("%s is owned by uid %d", f, st.Uid)
	case fi.Mode().Perm()&0o022 != 0: // a sticky directory too: whoever comes first creates a missing file
		return fmt.Sprintf("%s is writable by others (mode %04o)", f, fi.Mode().Perm())
	}
	return ""
}
