package pveapi

// The hosts' sshd, as far as the bpg provider uses it: bpg uploads
// snippets (storage.File, content type snippets) over SSH, not the API
// (proxmoxtf/resource/file.go fileCreate: NodeStreamUpload for every
// content type but iso, vztmpl and import). Its client (proxmox/ssh/
// client.go) dials the host's address, which it reads from GET
// /nodes/{node}/network (the first interface with an address and a
// gateway; provider.go apiResolver.Resolve), on port 22, and:
//   - getSudoAvailability: exec of `/bin/bash -c '<checkCmd>'`, whose
//     output "0" means "run as is" (root) and "1" "use sudo";
//   - uploadFile: exec of `/bin/bash -c 'export TRY_SUDO_USE_SUDO=<0|1>;
//     <TrySudo>; try_sudo /usr/bin/tee <datastore path>/snippets/<name>'`
//     with the file on stdin;
//   - checkUploadedFile: SFTP Open and Stat of the file (its size must be
//     the upload's);
//   - changeModeUploadedFile: SFTP Open, Stat and Chmod to the resource's
//     file_mode.
// Its host key callback accepts an unknown host (and appends it to
// ~/.ssh/known_hosts) and refuses only a changed key. The double runs no
// shell: it recognises those commands and answers any other as bash
// would answer a command it cannot run. Every session is journaled
// (Method "SSH", Path the host, Form the command or SFTP operation).

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
)

// sudoCheck is the start of bpg's getSudoAvailability command.
const sudoCheck = `if [ "$(id -u)" = "0" ]; then echo "0";`

// teeCmd matches bpg's uploadFile command: the file it writes.
var teeCmd = regexp.MustCompile(`try_sudo /usr/bin/tee (\S+)$`)

// SSHHost is one host's SSH server.
type SSHHost struct {
	s        *Server
	host     string
	user     string
	keys     []ssh.PublicKey
	mu       sync.Mutex
	hostKey  ssh.Signer
	listener net.Listener
	wg       sync.WaitGroup
}

// ServeSSH serves host's sshd on l with hostKey: user (root, as the prod
// stack's ssh.username) authenticates with one of keys; exec runs what
// bpg runs, and the sftp subsystem serves the host's dir storages. Close
// stops it.
func (s *Server) ServeSSH(l net.Listener, host string, hostKey ssh.Signer, user string, keys ...ssh.PublicKey) *SSHHost {
	h := &SSHHost{s: s, host: host, user: user, keys: keys, hostKey: hostKey, listener: l}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			h.wg.Add(1)
			go func() {
				defer h.wg.Done()
				h.serveConn(c)
			}()
		}
	}()
	return h
}

// SetHostKey changes the host's key for the connections that follow (a
// reinstalled host, or a machine in its place).
func (h *SSHHost) SetHostKey(k ssh.Signer) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hostKey = k
}

// Close stops accepting connections.
func (h *SSHHost) Close() error { return h.listener.Close() }

func (h *SSHHost) serveConn(c net.Conn) {
	defer func() { _ = c.Close() }()
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(m ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
			if m.User() == h.user && slices.ContainsFunc(h.keys, func(a ssh.PublicKey) bool { return string(a.Marshal()) == string(k.Marshal()) }) {
				return &ssh.Permissions{}, nil
			}
			return nil, fmt.Errorf("unknown key for %s", m.User())
		},
	}
	h.mu.Lock()
	cfg.AddHostKey(h.hostKey)
	h.mu.Unlock()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	conn, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		h.journal("connect", "refused: "+err.Error(), 1)
		return
	}
	defer func() { _ = conn.Close() }()
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "unknown channel type")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		go h.session(ch, creqs)
	}
}

// session serves one session channel: an exec or the sftp subsystem.
func (h *SSHHost) session(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer func() { _ = ch.Close() }()
	for r := range reqs {
		switch r.Type {
		case "exec":
			var p struct{ Cmd string }
			if err := ssh.Unmarshal(r.Payload, &p); err != nil {
				_ = r.Reply(false, nil)
				return
			}
			_ = r.Reply(true, nil)
			code := h.exec(ch, p.Cmd)
			_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{code}))
			return
		case "subsystem":
			var p struct{ Name string }
			if err := ssh.Unmarshal(r.Payload, &p); err != nil || p.Name != "sftp" {
				_ = r.Reply(false, nil)
				continue
			}
			_ = r.Reply(true, nil)
			fs := &sftpFS{h: h}
			srv := sftp.NewRequestServer(ch, sftp.Handlers{FileGet: fs, FilePut: fs, FileCmd: fs, FileList: fs})
			_ = srv.Serve()
			_ = srv.Close()
			return
		default:
			// env, pty-req and the like: refused, as bpg needs none.
			if r.WantReply {
				_ = r.Reply(false, nil)
			}
		}
	}
}

// exec runs one of bpg's commands and returns its exit status.
func (h *SSHHost) exec(ch ssh.Channel, cmd string) uint32 {
	script, ok := strings.CutPrefix(cmd, "/bin/bash -c '")
	script = strings.TrimSuffix(script, "'")
	script = strings.ReplaceAll(script, `'"'"'`, `'`)
	switch {
	case ok && strings.HasPrefix(script, sudoCheck):
		// id -u is 0 for root; the double has no sudo for anyone else.
		h.journal("exec", "sudo check", 0)
		_, _ = io.WriteString(ch, "0\n")
		return 0
	case ok && teeCmd.MatchString(script):
		file := teeCmd.FindStringSubmatch(script)[1]
		data, err := io.ReadAll(ch)
		if err == nil {
			err = h.write(file, data)
		}
		if err != nil {
			h.journal("exec", "tee "+file, 1)
			_, _ = io.WriteString(ch.Stderr(), "/usr/bin/tee: "+file+": "+err.Error()+"\n")
			return 1
		}
		h.journal("exec", fmt.Sprintf("tee %s (%d bytes)", file, len(data)), 0)
		_, _ = ch.Write(data) // tee copies its input to stdout
		return 0
	}
	h.journal("exec", cmd, 127)
	_, _ = io.WriteString(ch.Stderr(), "bash: the PVE double runs only the commands bpg's snippet upload runs\n")
	return 127
}

// journal records one SSH operation.
func (h *SSHHost) journal(op, what string, status int) {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	h.s.journal = append(h.s.journal, Entry{Time: time.Now(), Method: "SSH", Path: h.host, Query: op, Form: what, Status: status})
}

// file maps a path under a dir storage to its volume: (storage, volid).
// Only the storages' snippets directories hold files here.
func (h *SSHHost) file(p string) (*Storage, string, error) {
	p = path.Clean(p)
	host := h.s.hosts[h.host]
	for sid, st := range host.storages {
		if st.Type != "dir" || st.Path == "" {
			continue
		}
		rest, ok := strings.CutPrefix(p, st.Path+"/snippets/")
		if ok && rest != "" && !strings.Contains(rest, "/") {
			return st, sid + ":snippets/" + rest, nil
		}
	}
	return nil, "", os.ErrNotExist
}

// tee's errors, as strerror words them (tee prints "<file>: <error>").
var (
	errPermission = errors.New("Permission denied")         //nolint:staticcheck // strerror's words, printed as is
	errNoFile     = errors.New("No such file or directory") //nolint:staticcheck // strerror's words, printed as is
)

// write is tee's create-or-truncate: a new file gets mode 0644 (root's
// umask 022); an existing one keeps its mode.
func (h *SSHHost) write(p string, data []byte) error {
	if h.user != "root" {
		return errPermission
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	st, volid, err := h.file(p)
	if err != nil {
		return errNoFile
	}
	if !slices.Contains(st.Content, "snippets") {
		// The directory exists only where the content type is enabled
		// (pve-storage activate_storage creates the content subdirs).
		return errNoFile
	}
	mode := uint32(0o644)
	if v := st.volumes[volid]; v != nil {
		mode = v.Mode
	}
	st.volumes[volid] = &Volume{VolID: volid, Content: "snippets", Format: "snippet", Size: int64(len(data)), Data: slices.Clone(data), Mode: mode}
	return nil
}

// sftpFS serves the sftp subsystem on the host's storages.
type sftpFS struct{ h *SSHHost }

// volume returns the volume at p, locked out of s.mu's hands.
func (f *sftpFS) volume(p string) (*Volume, error) {
	f.h.s.mu.Lock()
	defer f.h.s.mu.Unlock()
	st, volid, err := f.h.file(p)
	if err != nil {
		return nil, err
	}
	v := st.volumes[volid]
	if v == nil {
		return nil, os.ErrNotExist
	}
	c := *v
	return &c, nil
}

func (f *sftpFS) Fileread(r *sftp.Request) (io.ReaderAt, error) {
	v, err := f.volume(r.Filepath)
	f.h.journal("sftp", "open "+r.Filepath, errStatus(err))
	if err != nil {
		return nil, err
	}
	return strings.NewReader(string(v.Data)), nil
}

func (f *sftpFS) Filewrite(r *sftp.Request) (io.WriterAt, error) {
	f.h.journal("sftp", "write "+r.Filepath, 1)
	return nil, sftp.ErrSSHFxOpUnsupported
}

// Filecmd serves Setstat (chmod) and refuses the rest.
func (f *sftpFS) Filecmd(r *sftp.Request) error {
	if r.Method != "Setstat" {
		f.h.journal("sftp", strings.ToLower(r.Method)+" "+r.Filepath, 1)
		return sftp.ErrSSHFxOpUnsupported
	}
	f.h.s.mu.Lock()
	defer f.h.s.mu.Unlock()
	st, volid, err := f.h.file(r.Filepath)
	var v *Volume
	if err == nil {
		if v = st.volumes[volid]; v == nil {
			err = os.ErrNotExist
		}
	}
	if err == nil && r.AttrFlags().Permissions {
		v.Mode = r.Attributes().Mode & 0o7777
	}
	what := "setstat " + r.Filepath
	if err == nil {
		what = fmt.Sprintf("chmod %#o %s", v.Mode, r.Filepath)
	}
	f.h.s.journal = append(f.h.s.journal, Entry{Time: time.Now(), Method: "SSH", Path: f.h.host, Query: "sftp", Form: what, Status: errStatus(err)})
	return err
}

// Filelist serves Stat of a file.
func (f *sftpFS) Filelist(r *sftp.Request) (sftp.ListerAt, error) {
	if r.Method != "Stat" && r.Method != "Lstat" {
		return nil, sftp.ErrSSHFxOpUnsupported
	}
	v, err := f.volume(r.Filepath)
	f.h.journal("sftp", "stat "+r.Filepath, errStatus(err))
	if err != nil {
		return nil, err
	}
	return lister{fileInfo{name: path.Base(r.Filepath), size: v.Size, mode: os.FileMode(v.Mode)}}, nil
}

func errStatus(err error) int {
	if err != nil {
		return 1
	}
	return 0
}

type lister []os.FileInfo

func (l lister) ListAt(out []os.FileInfo, off int64) (int, error) {
	if off >= int64(len(l)) {
		return 0, io.EOF
	}
	n := copy(out, l[off:])
	return n, nil
}

type fileInfo struct {
	name string
	size int64
	mode os.FileMode
}

func (i fileInfo) Name() string       { return i.name }
func (i fileInfo) Size() int64        { return i.size }
func (i fileInfo) Mode() os.FileMode  { return i.mode }
func (i fileInfo) ModTime() time.Time { return time.Unix(1733140000, 0) }
func (i fileInfo) IsDir() bool        { return false }
func (i fileInfo) Sys() any           { return nil }
