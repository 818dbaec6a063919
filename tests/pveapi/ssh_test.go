package pveapi

import (
	"crypto/ed25519"
	"crypto/rand"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/pkg/sftp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
)

// signer is a fresh ed25519 key.
func signer(t *testing.T) ssh.Signer {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	s, err := ssh.NewSignerFromKey(k)
	require.NoError(t, err)
	return s
}

// bpgUpload does what bpg's NodeStreamUpload does (proxmox/ssh/client.go):
// the sudo check, tee with the file on stdin, an SFTP stat of the size,
// then an SFTP chmod; it returns the first error.
func bpgUpload(t *testing.T, addr string, user, hostKey ssh.Signer, name, data string) error {
	t.Helper()
	c, err := ssh.Dial("tcp", addr, &ssh.ClientConfig{User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(user)}, HostKeyCallback: ssh.FixedHostKey(hostKey.PublicKey())})
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	run := func(cmd, stdin string) (string, error) {
		sess, err := c.NewSession()
		if err != nil {
			return "", err
		}
		defer func() { _ = sess.Close() }()
		sess.Stdin = strings.NewReader(stdin)
		out, err := sess.CombinedOutput("/bin/bash -c '" + strings.ReplaceAll(cmd, `'`, `'"'"'`) + "'")
		return string(out), err
	}
	out, err := run(`if [ "$(id -u)" = "0" ]; then echo "0"; elif true; then echo "1"; else echo "0"; fi`, "")
	if err != nil || strings.TrimSpace(out) != "0" {
		return err
	}
	file := "/var/lib/vz/snippets/" + name
	if _, err := run(`export TRY_SUDO_USE_SUDO=0; _try_sudo_check(){ :; }; try_sudo /usr/bin/tee `+file, data); err != nil {
		return err
	}
	sc, err := sftp.NewClient(c)
	if err != nil {
		return err
	}
	defer func() { _ = sc.Close() }()
	f, err := sc.Open(file)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() != int64(len(data)) {
		return os.ErrInvalid
	}
	return sc.Chmod(file, 0o600)
}

// TestSSHSnippetUpload: bpg's snippet upload writes the file on the host's
// dir storage, where the API lists it, with the mode it chmods; a key the
// host does not authorize is refused; a storage without the snippets
// content type has no directory for it.
func TestSSHSnippetUpload(t *testing.T) {
	s, c := start(t)
	host, user := signer(t), signer(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	h := s.ServeSSH(l, "pve-1", host, "root", user.PublicKey())
	t.Cleanup(func() { _ = h.Close() })

	require.NoError(t, bpgUpload(t, l.Addr().String(), user, host, "milner-prod-cp-1-talos.yaml", "machine: {}\n"))
	v := s.Volumes("pve-1", "local")["local:snippets/milner-prod-cp-1-talos.yaml"]
	assert.Equal(t, "machine: {}\n", string(v.Data))
	assert.Equal(t, uint32(0o600), v.Mode)
	st, data := c.call(http.MethodGet, "/nodes/pve-1/storage/local/content", map[string][]string{"content": {"snippets"}})
	assert.Equal(t, "200 OK", st)
	assert.Contains(t, string(data), `"volid":"local:snippets/milner-prod-cp-1-talos.yaml"`)

	err = bpgUpload(t, l.Addr().String(), signer(t), host, "x.yaml", "x")
	require.Error(t, err, "an unauthorized key")
	assert.Contains(t, err.Error(), "unable to authenticate")

	// Only the storage's path: the reply to GET /storage/local, which
	// needs Datastore.Allocate.
	st, _ = c.call(http.MethodGet, "/storage/local", nil)
	assert.Equal(t, "403 Permission check failed (/storage/local, Datastore.Allocate)", st)
}
