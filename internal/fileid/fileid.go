// Package fileid tells one incarnation of a file from another at the same
// path: what a libvirt dir pool's volume is, since its key is its path
// (libvirt src/storage/storage_util.c virStorageBackendVolCreateLocal:
// vol->key = vol->target.path), so a volume deleted and recreated there
// has the same key.
//
// libvirt itself tells the two apart by nothing: its volume XML and
// virStorageVolGetInfo give the path, sizes, permissions and <timestamps>
// filled from stat(2) (storage_util.c
// virStorageBackendUpdateVolTargetInfoFD): atime, mtime and ctime change
// with every write of a running VM, and btime comes from gnulib's
// get_stat_birthtime, which struct stat does not carry on Linux (libvirt
// 9.0.0 here prints <btime>0</btime>). No inode number is in it, and the
// host reuses inode numbers: on this machine's ext4 a volume deleted and
// recreated with virsh got its old inode number back.
//
// The host does tell, to whoever can look up the path (statx(2) and
// name_to_handle_at(2) need search permission on its directories, not read
// permission on the file), so only where the file is on this host:
//   - the birth time (statx STATX_BTIME: ext4 with 256-byte inodes, xfs v5,
//     btrfs, tmpfs on recent kernels), set when the inode is made and never
//     by a write;
//   - the file handle (name_to_handle_at), the filesystem's own name of the
//     inode for NFS export: on ext4 (handle type 1, FILEID_INO32_GEN) the
//     inode number and its generation, which a reused inode number does not
//     keep (both seen here); on NFS the server's handle;
//   - the inode number, which alone proves only a change, never sameness.
package fileid

import (
	"encoding/hex"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// Of is the identity of the file at path as this host tells it:
// "ino=<n> btime=<s>.<ns> fh=<type>:<hex>", each field present only when
// the host gives it; "" when the path cannot be looked up (not on this
// host, no permission).
func Of(path string) string {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_INO|unix.STATX_BTIME, &st); err != nil {
		return ""
	}
	var f []string
	if st.Mask&unix.STATX_INO != 0 {
		f = append(f, fmt.Sprintf("ino=%d", st.Ino))
	}
	if st.Mask&unix.STATX_BTIME != 0 {
		f = append(f, fmt.Sprintf("btime=%d.%09d", st.Btime.Sec, st.Btime.Nsec))
	}
	// Without AT_HANDLE_FID or AT_HANDLE_CONNECTABLE: the inode's own
	// handle, not its parent's; a filesystem that cannot encode one
	// (EOPNOTSUPP) tells the rest.
	if h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, path, 0); err == nil {
		f = append(f, fmt.Sprintf("fh=%d:%s", h.Type(), hex.EncodeToString(h.Bytes())))
	}
	return strings.Join(f, " ")
}

// Differ compares two identities Of gave (recorded, then live) and returns
// the first field both tell that differs ("" when none does): then they
// are two files. A field only one of them tells is not compared, so
// identities with nothing in common never differ.
func Differ(recorded, live string) string {
	l := fields(live)
	for _, kv := range strings.Fields(recorded) {
		k, v, _ := strings.Cut(kv, "=")
		if lv, ok := l[k]; ok && lv != v {
			return k
		}
	}
	return ""
}

// Tells reports whether an identity can show two files to be one: it has a
// birth time or a file handle (an inode number is reused).
func Tells(id string) bool {
	f := fields(id)
	return f["btime"] != "" || f["fh"] != ""
}

func fields(id string) map[string]string {
	m := map[string]string{}
	for _, kv := range strings.Fields(id) {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}
