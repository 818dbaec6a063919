// Package pveapi is a Proxmox VE API double for tests: HTTPS, API-token
// authentication and privilege checks as PVE makes them, in-memory hosts,
// storages, volumes and QEMU guests, and asynchronous tasks with UPIDs that
// clients poll. It serves what the bpg provider (terraform-provider-proxmox
// v0.95.0, ../shared/providers) and Milner's own client (internal/pve) call
// for the prod stack; every request is journaled.
//
// Semantics are read from Proxmox's own sources (the public mirrors of
// pve-manager, pve-http-server, pve-access-control, pve-storage and
// qemu-server); each handler names the function it follows. What could not
// be read there is listed below as assumed.
//
//   - Against the PVE API double (`tests/pveapi`, HTTPS, `httptest`): the
//     empty-state/orphan guard on the old OpenTofu cluster (with the exact
//     reassignment and adopt commands), the stale-VM and known_hosts guards on
//     the converged cluster, the privilege preflight, the refusal of an
//     unverifiable certificate, the teardown's unprotect/re-protect
//     (`internal/pve`), and `TestProdNeedsAreEnough`: a token granted exactly
//     `pve.Needs`, each privilege on its own path, makes one node's substrate
//     through the calls bpg makes (download-url, holder create with
//     `import-from`, resize, node VM attaching the holder's volumes, start).
//     The double (`go test ./tests/pveapi/`) answers as PVE does, each handler
//     naming the Perl function it follows: token auth (`401 No ticket`, `401
//     Authentication failed!` after PVE's 3 s delay), `403 Permission check
//     failed (<path>, <priv>)` with ACLs propagated to child paths, errors in
//     the status line and the body's `message`, UPID tasks polled through
//     `/nodes/{node}/tasks/{upid}/status`, `create_disks` (new, `import-from`,
//     attach with the volume's current size, `format=` mismatch refused),
//     `check_volume_access`, `resize` (`shrinking disks is not supported`),
//     `destroy_vm` (only owned volumes referenced by the config are freed, a
//     holder's volume attached by the node VM is not; `destroy-unreferenced-disks`
//     frees every volume of the id; a protected or running guest is refused),
//     `download-url` (content and extension checks, checksum, no overwrite).
//     Endpoints: `/version`, `/access/permissions`, `/cluster/resources`,
//     `/cluster/nextid`, `/nodes`, `/pools`, `/nodes/{node}/network`,
//     `/nodes/{node}/query-url-metadata`, `/nodes/{node}/storage` and
//     `…/{storage}/status|content|content/{volume}|download-url`,
//     `/nodes/{node}/tasks/{upid}/status|log`, `/nodes/{node}/qemu` (list,
//     create) and `…/{vmid}/config` (GET, PUT, POST), `pending`,
//     `status/current`, `status/start|stop|shutdown|reboot`, `resize`,
//     `cloudinit`, DELETE. Sources read: the public mirrors of qemu-server
//     (9.2.6), pve-storage (9.1.7), pve-manager, pve-http-server and
//     pve-access-control at their newest commits.
//     What the double caught in Milner's preflight, from those sources: the
//     holder's `import-from` needs `Datastore.Audit` (or `AllocateSpace`) on
//     the image datastore (`check_volume_access`, content `import`), which the
//     preflight did not ask for, so a token granted exactly its list was
//     refused creating the holder; and attaching another VM's volume does not
//     need `Datastore.Allocate` (since pve-storage 42352a4, PVE 7.2:
//     `Datastore.Audit` on the storage and `VM.Config.Disk` on the owner), so
//     the preflight no longer asks for a datastore administrator. A
//     `cicustom` snippet needs only `VM.Config.Cloudinit` (no volume check of
//     it in qemu-server `API2/Qemu.pm`).
//
//   - Assumed (PVE behaviour the double has that was not read in source):
//     the exact reason phrase of a missing VM id in `nextid`, of a failed
//     download (`download failed: 404 Not Found`) and of a URL that
//     `query-url-metadata` cannot reach; that a resize answers with a task
//     (bpg expects one); `GET /access/permissions` listing each ACL path with
//     its privileges (not every path below it); a task's pid/pstart; the
//     volume sizes PVE reports for a fresh cloud-init drive (4 MiB); that the
//     status line of a worker error carries no trailing newline; PVE 8 and 9
//     agreeing on all of the above (the sources read are PVE 9's). The sshd
//     double is OpenSSH's part, not PVE's, modelled on what bpg runs: root's
//     `id -u` is 0 (no sudo), `tee` creates a new file `0644` (root's umask
//     022) and keeps an existing file's mode, `/var/lib/vz/snippets` exists
//     on a storage with the snippets content type; that `qm shutdown` of a
//     guest that powers off on ACPI ends `stopped` (the double applies it at
//     the task's end); that pve-http-server takes bpg's `DELETE
//     .../qemu/<id>/` with its trailing slash; that the `imgdel` worker of
//     bpg's delete of an unmanaged image, which bpg does not wait for, has
//     freed the file before the `download` worker it starts next checks for it
//     (the double ends tasks in the order they were forked).
//
//   - Checked in upstream sources/docs: bpg's multi-node guide (node-scoped
//     downloads, `node_name` change = recreate unless `migrate`, SSH for
//     snippets), the SDK's `storage.File` docs, pve-storage `check_volume_access`,
//     qemu-server `move_vm_disk` (reassign rules), pve-manager `download_url`
//     permissions, Talos v1.11.5's nocloud platform (user-data is the machine
//     config) and config acquisition (STATE before the platform),
//     terraform-provider-talos' `talosClientOp` (insecure probe, then the client
//     certificate), bpg's `user_data_file_id` (`ForceNew`), qemu-server's
//     cloud-init drive rebuild from the snippet at VM start.
package pveapi

import (
	"crypto/sha1" //nolint:gosec // PVE's config digest is a SHA-1 (PVE::Tools::get_file_hash style); not security
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Version is the PVE release the double reports (GET /version).
const Version = "8.4.1"

// GiB is one gibibyte.
const GiB = int64(1) << 30

// Token is an API token: its id (user@realm!name), its secret, and the
// effective privileges by ACL path (propagated to the paths below, as PVE
// propagates an ACL set with propagate=1).
type Token struct {
	ID     string
	Secret string
	ACL    map[string][]string
}

// Image is a file the double can download from a URL (download-url,
// query-url-metadata): its content and, for a disk image, the virtual size
// a disk imported from it gets.
type Image struct {
	Data        []byte
	VirtualSize int64
}

// Volume is one volume on one host's storage.
type Volume struct {
	// VolID is "<storage>:<name>", e.g. local-lvm:vm-1150-disk-0.
	VolID string
	// Content is images, import, snippets or iso.
	Content string
	// Owner is the VM id encoded in the name (0: none).
	Owner int
	// Format is raw, qcow2, ...
	Format string
	// Size is the volume's size in bytes.
	Size int64
	// Data stands for the volume's bytes: tests compare it across a
	// replace. A fresh disk is empty; an imported one carries the image.
	Data []byte
	// Mode is a file's mode (snippets), e.g. 0600.
	Mode uint32
	// virtual is a disk image's virtual size: what a disk imported from it gets.
	virtual int64
}

// Storage is one storage as a host sees it.
type Storage struct {
	// Type is dir (file based: import, snippets, iso) or lvmthin (images).
	Type string
	// Content lists the content types the storage is configured for.
	Content []string
	// Path is a dir storage's mount point (/var/lib/vz for local).
	Path    string
	volumes map[string]*Volume // by VolID
}

// Host is one PVE node.
type Host struct {
	// Name is the node name, e.g. pve-1.
	Name string
	// Address is its address on vmbr0 (GET /nodes/{node}/network).
	Address string
	// Gateway is vmbr0's gateway.
	Gateway  string
	storages map[string]*Storage
}

// VM is one guest: QEMU (the default), or an LXC container that only
// shows in the cluster's resources.
type VM struct {
	VMID int
	Node string
	// Type is "qemu" ("" too) or "lxc".
	Type   string
	Status string // running | stopped
	// Config holds the guest's config keys as qm config shows them.
	Config map[string]string
}

// Entry is one journaled request.
type Entry struct {
	Time   time.Time
	Method string
	// Path is below /api2/json, e.g. /nodes/pve-1/qemu/150/config.
	Path  string
	Query string
	// Form is the urlencoded request body.
	Form   string
	Status int
	// Token is the token id the request authenticated as ("" if none).
	Token string
}

// String renders an entry as "METHOD path?query form -> status".
func (e Entry) String() string {
	s := e.Method + " " + e.Path
	if e.Query != "" {
		s += "?" + e.Query
	}
	if e.Form != "" {
		s += " " + e.Form
	}
	return s + " -> " + strconv.Itoa(e.Status)
}

// task is one worker task.
type task struct {
	upid, node, typ, id, user string
	start                     time.Time
	done                      time.Time
	seq                       int    // the order it was started in
	exit                      string // OK or the error
	log                       []string
	apply                     func() error // run once when the task ends
	applied                   bool
}

// Server is the PVE API double.
type Server struct {
	// UnauthorizedDelay delays a refused authentication, as PVE's API
	// server does (pve-http-server PVE::APIServer::AnyEvent, "always delay
	// unauthorized calls by 3 seconds"). Zero in tests that refuse often.
	UnauthorizedDelay time.Duration
	// TaskDuration is how long a worker task runs before it is stopped.
	TaskDuration time.Duration

	// OnPower, when set, is called (in its own goroutine) with a copy of
	// a guest each time it starts or stops: the test's stand-in for what
	// the guest's firmware and OS do at power-on and power-off.
	OnPower func(VM)

	mu      sync.Mutex
	hosts   map[string]*Host
	tokens  map[string]*Token
	images  map[string]Image
	vms     map[int]*VM
	tasks   map[string]*task
	journal []Entry
	pid     int
	srv     *httptest.Server
}

// New returns a double of a PVE cluster of hosts, each with the storages
// local (dir: import, iso, vztmpl, snippets, backup) and local-lvm (lvmthin:
// images), as a PVE 8 install makes them.
func New(hosts ...Host) *Server {
	s := &Server{
		UnauthorizedDelay: 3 * time.Second,
		TaskDuration:      50 * time.Millisecond,
		hosts:             map[string]*Host{},
		tokens:            map[string]*Token{},
		images:            map[string]Image{},
		vms:               map[int]*VM{},
		tasks:             map[string]*task{},
		pid:               0x1000,
	}
	for _, h := range hosts {
		h.storages = map[string]*Storage{
			"local":     {Type: "dir", Path: "/var/lib/vz", Content: []string{"backup", "import", "iso", "snippets", "vztmpl"}, volumes: map[string]*Volume{}},
			"local-lvm": {Type: "lvmthin", Content: []string{"images", "rootdir"}, volumes: map[string]*Volume{}},
		}
		s.hosts[h.Name] = &h
	}
	return s
}

// AddToken lets tok authenticate.
func (s *Server) AddToken(tok Token) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens[tok.ID] = &tok
}

// AddImage makes url downloadable.
func (s *Server) AddImage(url string, img Image) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.images[url] = img
}

// AddVM puts a guest on the cluster as if made out of band.
func (s *Server) AddVM(v VM) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v.Config = maps.Clone(v.Config)
	s.vms[v.VMID] = &v
}

// PutVolume puts a volume on host's storage as if made out of band.
func (s *Server) PutVolume(host, storage string, v Volume) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hosts[host].storages[storage].volumes[v.VolID] = &v
}

// GuestPoweredOff stops a running guest as if its OS had powered the
// machine off (an ACPI shutdown it finished, or Talos' Shutdown): PVE
// then reports it "stopped". No request is journaled.
func (s *Server) GuestPoweredOff(vmid int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v := s.vms[vmid]; v != nil && v.Status == "running" {
		s.setStatus(v, "stopped")
	}
}

// setStatus sets a guest's power state and tells OnPower (s.mu held).
func (s *Server) setStatus(v *VM, status string) {
	if v.Status == status {
		return
	}
	v.Status = status
	if f := s.OnPower; f != nil {
		c := *v
		c.Config = maps.Clone(v.Config)
		go f(c)
	}
}

// RemoveVM removes a guest as if destroyed out of band, its disks left.
func (s *Server) RemoveVM(vmid int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.vms, vmid)
}

// RemoveVolume removes a volume as if deleted on the host out of band.
func (s *Server) RemoveVolume(host, storage, volid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.hosts[host].storages[storage].volumes, volid)
}

// Journal returns every request so far.
func (s *Server) Journal() []Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.journal)
}

// VMs returns a copy of every guest, by id.
func (s *Server) VMs() map[int]VM {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settle()
	out := map[int]VM{}
	for id, v := range s.vms {
		c := *v
		c.Config = maps.Clone(v.Config)
		out[id] = c
	}
	return out
}

// Volumes returns a copy of every volume on host's storage, by VolID.
func (s *Server) Volumes(host, storage string) map[string]Volume {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settle()
	out := map[string]Volume{}
	for id, v := range s.hosts[host].storages[storage].volumes {
		out[id] = *v
	}
	return out
}

// Start serves the double over HTTPS on a loopback port (httptest's
// self-signed certificate, for IP 127.0.0.1 and "example.com").
func (s *Server) Start() *httptest.Server {
	s.srv = httptest.NewTLSServer(s)
	return s.srv
}

// StartOnTLS serves the double over HTTPS on l with cfg's certificate.
func (s *Server) StartOnTLS(l net.Listener, cfg *tls.Config) *httptest.Server {
	s.srv = httptest.NewUnstartedServer(s)
	_ = s.srv.Listener.Close()
	s.srv.Listener = l
	s.srv.TLS = cfg
	s.srv.StartTLS()
	return s.srv
}

// apiError is an error PVE answers with: an HTTP status and its message
// (PVE puts the message in the status line and in the body's "message";
// pve-http-server Formatter/Standard.pm prepare_response_data), and for a
// parameter error the per-parameter errors.
type apiError struct {
	code   int
	msg    string
	errors map[string]string
}

func (e *apiError) Error() string { return e.msg }

func fail(code int, format string, a ...any) *apiError {
	return &apiError{code: code, msg: fmt.Sprintf(format, a...)}
}

// paramErr is PVE's raise_param_exc: 400 "Parameter verification failed."
func paramErr(name, msg string) *apiError {
	return &apiError{code: http.StatusBadRequest, msg: "Parameter verification failed.", errors: map[string]string{name: msg}}
}

// req is one request being served.
type req struct {
	method string
	parts  []string // path below /api2/json, split
	form   url.Values
	query  url.Values
	token  *Token
}

// ServeHTTP serves one API request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	e := Entry{Time: time.Now(), Method: r.Method, Path: strings.TrimPrefix(r.URL.Path, "/api2/json"), Query: r.URL.RawQuery}
	if r.Method == http.MethodPost || r.Method == http.MethodPut {
		e.Form = r.PostForm.Encode()
	}
	data, err := s.serve(r, &e)
	e.Status = http.StatusOK
	if err != nil {
		e.Status = err.code
	}
	s.mu.Lock()
	s.journal = append(s.journal, e)
	s.mu.Unlock()
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	_ = json.NewEncoder(w).Encode(map[string]any{"data": data})
}

// writeError answers with PVE's status line (the message as the reason
// phrase, which net/http cannot set, hence the hijack) and body.
func writeError(w http.ResponseWriter, e *apiError) {
	body := map[string]any{"data": nil, "message": e.msg + "\n"}
	if e.errors != nil {
		body["errors"] = e.errors
	}
	raw, _ := json.Marshal(body)
	conn, buf, herr := w.(http.Hijacker).Hijack()
	if herr != nil {
		http.Error(w, e.msg, e.code)
		return
	}
	defer func() { _ = conn.Close() }()
	_, _ = fmt.Fprintf(buf, "HTTP/1.1 %d %s\r\nContent-Type: application/json;charset=UTF-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		e.code, e.msg, len(raw), raw)
	_ = buf.Flush()
}

// serve authenticates and routes one request.
func (s *Server) serve(r *http.Request, e *Entry) (any, *apiError) {
	p := strings.TrimPrefix(r.URL.Path, "/api2/json/")
	if p == r.URL.Path {
		return nil, fail(http.StatusNotImplemented, "no such uri")
	}
	tok, aerr := s.authenticate(r.Header.Get("Authorization"))
	if aerr != nil {
		time.Sleep(s.UnauthorizedDelay)
		return nil, aerr
	}
	e.Token = tok.ID
	q := &req{method: r.Method, parts: strings.Split(strings.Trim(p, "/"), "/"), form: r.PostForm, query: r.URL.Query(), token: tok}
	if r.Method == http.MethodGet || r.Method == http.MethodDelete {
		q.form = r.URL.Query()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settle()
	return s.route(q)
}

// authenticate follows pve-manager PVE/HTTPServer.pm auth_handler and
// pve-access-control PVE::AccessControl::verify_token: the header is
// "PVEAPIToken=<user>@<realm>!<name>=<secret>"; a missing header is "No
// ticket", an unknown token or a wrong secret "Authentication failed!",
// both 401 (pve-http-server AnyEvent.pm: a non-exception error from the
// auth handler becomes HTTP_UNAUTHORIZED with the message).
func (s *Server) authenticate(header string) (*Token, *apiError) {
	v, ok := strings.CutPrefix(header, "PVEAPIToken=")
	if !ok {
		return nil, fail(http.StatusUnauthorized, "No ticket")
	}
	i := strings.LastIndex(v, "=")
	if i < 0 {
		return nil, fail(http.StatusUnauthorized, "Authentication failed!")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	tok, ok := s.tokens[v[:i]]
	if !ok || tok.Secret != v[i+1:] {
		return nil, fail(http.StatusUnauthorized, "Authentication failed!")
	}
	return tok, nil
}

// privs returns the token's privileges on path: those of its nearest
// ancestor with an ACL (PVE propagates ACLs down the tree).
func (t *Token) privs(p string) []string {
	for ; ; p = path.Dir(p) {
		if pr, ok := t.ACL[p]; ok || p == "/" {
			return pr
		}
	}
}

// check is PVE::RPCEnvironment::check: every priv on path, else 403
// "Permission check failed (<path>, <priv>)" (raise_perm_exc("$path, $priv")).
func (q *req) check(p string, privs ...string) *apiError {
	have := q.token.privs(p)
	for _, pr := range privs {
		if !slices.Contains(have, pr) {
			return fail(http.StatusForbidden, "Permission check failed (%s, %s)", p, pr)
		}
	}
	return nil
}

// can reports whether the token holds every priv on path.
func (q *req) can(p string, privs ...string) bool { return q.check(p, privs...) == nil }

// settle ends the tasks whose time has come, applying their effects in
// the order the workers were forked (an earlier worker's effect is there
// for a later one: a volume an imgdel frees before a download checks for it).
func (s *Server) settle() {
	now := time.Now()
	for _, t := range slices.SortedFunc(maps.Values(s.tasks), func(a, b *task) int { return a.seq - b.seq }) {
		if !t.applied && !now.Before(t.done) {
			t.applied = true
			if t.apply != nil {
				if err := t.apply(); err != nil {
					t.exit = strings.TrimSpace(err.Error())
					t.log = append(t.log, "TASK ERROR: "+t.exit)
					continue
				}
			}
			t.log = append(t.log, "TASK OK")
		}
	}
}

// startTask starts a worker (PVE::RPCEnvironment::fork_worker) on node and
// returns its UPID, "UPID:<node>:<pid>:<pstart>:<starttime>:<type>:<id>:<user>:"
// with pid, pstart and starttime in hex (pve-common PVE::Tools::upid_encode).
func (s *Server) startTask(q *req, node, typ, id string, d time.Duration, apply func() error) string {
	s.pid++
	now := time.Now()
	upid := fmt.Sprintf("UPID:%s:%08X:%08X:%08X:%s:%s:%s:", node, s.pid, s.pid*7, now.Unix(), typ, id, q.token.ID)
	s.tasks[upid] = &task{seq: s.pid, upid: upid, node: node, typ: typ, id: id, user: q.token.ID, start: now, done: now.Add(d), exit: "OK", apply: apply}
	return upid
}

// route dispatches a request on its path.
func (s *Server) route(q *req) (any, *apiError) {
	p := q.parts
	m := q.method
	switch {
	case m == "GET" && match(p, "version"):
		return map[string]any{"version": Version, "release": "8.4", "repoid": "2a5fa54a8503f96d"}, nil
	case m == "GET" && match(p, "access", "permissions"):
		return s.permissions(q), nil
	case m == "GET" && match(p, "cluster", "resources"):
		return s.resources(q), nil
	case m == "GET" && match(p, "cluster", "nextid"):
		return s.nextID(q)
	case m == "GET" && match(p, "nodes"):
		return s.nodes(), nil
	case m == "GET" && match(p, "pools"):
		return []any{}, nil
	case m == "GET" && len(p) == 2 && p[0] == "storage":
		return s.storageConfig(q, p[1])
	}
	if len(p) < 2 || p[0] != "nodes" {
		return nil, fail(http.StatusNotImplemented, "Method '%s /%s' not implemented", m, strings.Join(p, "/"))
	}
	host, ok := s.hosts[p[1]]
	if !ok {
		// pve-cluster: a node not in the cluster.
		return nil, fail(http.StatusInternalServerError, "hostname lookup '%s' failed - failed to get address info for: %s: Name or service not known", p[1], p[1])
	}
	rest := p[2:]
	switch {
	case m == "GET" && match(rest, "network"):
		return s.network(q, host)
	case m == "GET" && match(rest, "query-url-metadata"):
		return s.queryURLMetadata(q, host)
	case m == "GET" && match(rest, "storage"):
		return s.nodeStorages(q, host), nil
	case len(rest) >= 2 && rest[0] == "storage":
		return s.storage(q, host, rest[1], rest[2:])
	case len(rest) == 3 && rest[0] == "tasks":
		return s.task(q, host, rest[1], rest[2])
	case m == "DELETE" && len(rest) == 2 && rest[0] == "tasks":
		return s.stopTask(q, host, rest[1])
	case m == "GET" && match(rest, "qemu"):
		return s.listQemu(q, host), nil
	case m == "POST" && match(rest, "qemu"):
		return s.createVM(q, host)
	case len(rest) >= 2 && rest[0] == "qemu":
		vmid, err := strconv.Atoi(rest[1])
		if err != nil {
			return nil, paramErr("vmid", "type check ('integer') failed - got '"+rest[1]+"'")
		}
		return s.qemu(q, host, vmid, rest[2:])
	}
	return nil, fail(http.StatusNotImplemented, "Method '%s /%s' not implemented", m, strings.Join(p, "/"))
}

// match reports whether parts is exactly want.
func match(parts []string, want ...string) bool { return slices.Equal(parts, want) }

// permissions is GET /access/permissions (pve-access-control
// PVE/API2/AccessControl.pm permissions -> get_effective_permissions): the
// token's privileges by path, each 1 (propagated).
func (s *Server) permissions(q *req) map[string]map[string]int {
	out := map[string]map[string]int{}
	for p, privs := range q.token.ACL {
		out[p] = map[string]int{}
		for _, pr := range privs {
			out[p][pr] = 1
		}
	}
	return out
}

// resources is GET /cluster/resources (pve-manager PVE/API2/Cluster.pm
// resources): guests the caller may audit (VM.Audit on /vms/<id>),
// storages (Datastore.Audit), nodes.
func (s *Server) resources(q *req) []map[string]any {
	typ := q.query.Get("type")
	var out []map[string]any
	if typ == "" || typ == "vm" {
		for _, id := range slices.Sorted(maps.Keys(s.vms)) {
			v := s.vms[id]
			if !q.can(fmt.Sprintf("/vms/%d", id), "VM.Audit") {
				continue
			}
			typ := v.Type
			if typ == "" {
				typ = "qemu"
			}
			out = append(out, map[string]any{
				"id": fmt.Sprintf("%s/%d", typ, id), "type": typ, "vmid": id, "name": v.Config["name"], "node": v.Node,
				"status": v.Status, "template": 0, "maxmem": memBytes(v.Config), "maxcpu": atoiOr(v.Config["cores"], 1),
			})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.hosts)) {
		h := s.hosts[name]
		if typ == "" || typ == "node" {
			out = append(out, map[string]any{"id": "node/" + name, "type": "node", "node": name, "status": "online"})
		}
		if typ == "" || typ == "storage" {
			for _, sid := range slices.Sorted(maps.Keys(h.storages)) {
				if q.can("/storage/"+sid, "Datastore.Audit") {
					out = append(out, map[string]any{"id": "storage/" + name + "/" + sid, "type": "storage", "node": name, "storage": sid,
						"status": "available", "content": strings.Join(h.storages[sid].Content, ","), "plugintype": h.storages[sid].Type})
				}
			}
		}
	}
	return out
}

// nextID is GET /cluster/nextid (pve-manager PVE/API2/Cluster.pm nextid):
// the given id if free, else 400 "VM <id> already exists"; without one,
// the lowest free id from 100.
func (s *Server) nextID(q *req) (any, *apiError) {
	if v := q.query.Get("vmid"); v != "" {
		id, err := strconv.Atoi(v)
		if err != nil {
			return nil, paramErr("vmid", "type check ('integer') failed - got '"+v+"'")
		}
		if _, ok := s.vms[id]; ok {
			return nil, paramErr("vmid", fmt.Sprintf("VM %d already exists", id))
		}
		return strconv.Itoa(id), nil
	}
	for id := 100; ; id++ {
		if _, ok := s.vms[id]; !ok {
			return strconv.Itoa(id), nil
		}
	}
}

// storageConfig is GET /storage/{storage} (pve-storage
// PVE/API2/Storage/Config.pm read: Datastore.Allocate on
// /storage/{storage}; $api_storage_config): the storage's cluster-wide
// configuration, its type, content types and, for a dir storage, path.
// bpg reads it for the path it uploads a snippet to (file.go fileCreate,
// GetDatastore).
func (s *Server) storageConfig(q *req, sid string) (any, *apiError) {
	if err := q.check("/storage/"+sid, "Datastore.Allocate"); err != nil {
		return nil, err
	}
	for _, name := range slices.Sorted(maps.Keys(s.hosts)) {
		if st, ok := s.hosts[name].storages[sid]; ok {
			out := map[string]any{"storage": sid, "type": st.Type, "content": strings.Join(st.Content, ","), "digest": "5d4a2a8a7c0f4d3e9b1c6e2f7a8b9c0d1e2f3a4b"}
			if st.Path != "" {
				out["path"] = st.Path
			}
			return out, nil
		}
	}
	// PVE::Storage::storage_config.
	return nil, fail(http.StatusInternalServerError, "storage '%s' does not exist", sid)
}

// nodes is GET /nodes.
func (s *Server) nodes() []map[string]any {
	var out []map[string]any
	for _, name := range slices.Sorted(maps.Keys(s.hosts)) {
		out = append(out, map[string]any{"node": name, "status": "online", "type": "node", "id": "node/" + name})
	}
	return out
}

// network is GET /nodes/{node}/network (pve-manager PVE/API2/Network.pm
// index, Sys.Audit on /nodes/{node}): the host's interfaces, vmbr0 with
// its address and gateway.
func (s *Server) network(q *req, h *Host) (any, *apiError) {
	if err := q.check("/nodes/"+h.Name, "Sys.Audit"); err != nil {
		return nil, err
	}
	return []map[string]any{
		{"iface": "lo", "type": "loopback", "method": "loopback", "active": 1, "autostart": 1, "families": []string{"inet"}},
		{"iface": "enp1s0", "type": "eth", "method": "manual", "active": 1, "exists": 1, "families": []string{"inet"}},
		{"iface": "vmbr0", "type": "bridge", "method": "static", "active": 1, "autostart": 1, "bridge_ports": "enp1s0",
			"address": h.Address, "netmask": "24", "cidr": h.Address + "/24", "gateway": h.Gateway, "families": []string{"inet"}},
	}, nil
}

// queryURLMetadata is GET /nodes/{node}/query-url-metadata (pve-manager
// PVE/API2/Nodes.pm query_url_metadata; the same privileges as
// download-url): the file name, size and type a HEAD of the URL reports.
func (s *Server) queryURLMetadata(q *req, h *Host) (any, *apiError) {
	if err := q.checkAny([][2]string{{"/", "Sys.Audit"}, {"/", "Sys.Modify"}}, "/nodes/"+h.Name, "Sys.AccessNetwork"); err != nil {
		return nil, err
	}
	u := q.query.Get("url")
	img, ok := s.images[u]
	if !ok {
		return nil, fail(http.StatusInternalServerError, "invalid server response: '404 Not Found'")
	}
	return map[string]any{"filename": path.Base(u), "size": len(img.Data), "mimetype": "application/octet-stream"}, nil
}

// checkAny passes with every (path, priv) of all, or with priv alt on altPath.
func (q *req) checkAny(all [][2]string, altPath, alt string) *apiError {
	var first *apiError
	for _, pp := range all {
		if err := q.check(pp[0], pp[1]); err != nil && first == nil {
			first = err
		}
	}
	if first == nil || q.can(altPath, alt) {
		return nil
	}
	return first
}

// nodeStorages is GET /nodes/{node}/storage (pve-storage
// PVE/API2/Storage/Status.pm index): the storages the caller may audit,
// filtered by ?content= and ?storage=.
func (s *Server) nodeStorages(q *req, h *Host) []map[string]any {
	var out []map[string]any
	for _, sid := range slices.Sorted(maps.Keys(h.storages)) {
		st := h.storages[sid]
		if c := q.query.Get("content"); c != "" && !slices.Contains(st.Content, c) {
			continue
		}
		if f := q.query.Get("storage"); f != "" && f != sid {
			continue
		}
		if !q.can("/storage/"+sid, "Datastore.Audit") && !q.can("/storage/"+sid, "Datastore.AllocateSpace") {
			continue
		}
		out = append(out, storageStatus(sid, st))
	}
	return out
}

func storageStatus(sid string, st *Storage) map[string]any {
	var used int64
	for _, v := range st.volumes {
		used += v.Size
	}
	total := 2048 * GiB
	return map[string]any{"storage": sid, "type": st.Type, "content": strings.Join(st.Content, ","), "active": 1, "enabled": 1,
		"shared": 0, "total": total, "used": used, "avail": total - used, "used_fraction": float64(used) / float64(total)}
}

// storage serves /nodes/{node}/storage/{storage}/...
func (s *Server) storage(q *req, h *Host, sid string, rest []string) (any, *apiError) {
	st, ok := h.storages[sid]
	if !ok {
		// pve-storage PVE::Storage::storage_config.
		return nil, fail(http.StatusInternalServerError, "storage '%s' does not exist", sid)
	}
	switch {
	case q.method == "GET" && match(rest, "status"):
		if err := q.check("/storage/"+sid, "Datastore.Audit"); err != nil {
			return nil, err
		}
		return storageStatus(sid, st), nil
	case q.method == "GET" && match(rest, "content"):
		return s.listContent(q, sid, st)
	case q.method == "POST" && match(rest, "download-url"):
		return s.downloadURL(q, h, sid, st)
	case len(rest) >= 2 && rest[0] == "content":
		// The content subclass is registered with fragmentDelimiter ''
		// (pve-storage PVE/API2/Storage/Status.pm, "volume IDs may contain
		// a slash"): the rest of the path, unescaped, is the volume, so
		// import%2Fx.qcow2 and import/x.qcow2 name the same volume.
		volid := strings.Join(rest[1:], "/")
		if !strings.Contains(volid, ":") {
			volid = sid + ":" + volid
		}
		v, ok := st.volumes[volid]
		if !ok {
			return nil, fail(http.StatusInternalServerError, "volume '%s' does not exist", volid)
		}
		switch q.method {
		case "GET":
			if err := q.check("/storage/"+sid, "Datastore.Audit"); err != nil {
				return nil, err
			}
			return map[string]any{"path": st.Path + "/" + strings.TrimPrefix(v.VolID, sid+":"), "size": v.Size, "used": v.Size, "format": v.Format}, nil
		case "DELETE":
			// pve-storage PVE/API2/Storage/Content.pm delete: Datastore.Allocate
			// on the storage (a VM's backup: Datastore.AllocateSpace and
			// VM.Backup, not modelled); an imgdel worker frees the volume
			// (vdisk_free), its task id the storage. The caller gets the UPID
			// at once: bpg's DeleteDatastoreFile does not wait for it.
			if err := q.check("/storage/"+sid, "Datastore.Allocate"); err != nil {
				return nil, err
			}
			upid := s.startTask(q, h.Name, "imgdel", sid, s.TaskDuration, func() error {
				delete(st.volumes, volid)
				return nil
			})
			return upid, nil
		}
	}
	return nil, fail(http.StatusNotImplemented, "Method '%s /nodes/%s/storage/%s/%s' not implemented", q.method, h.Name, sid, strings.Join(rest, "/"))
}

// listContent is GET .../content (pve-storage PVE/API2/Storage/Content.pm
// index, Datastore.Audit or Datastore.AllocateSpace): the volumes, filtered
// by ?content= and ?vmid=.
func (s *Server) listContent(q *req, sid string, st *Storage) (any, *apiError) {
	if !q.can("/storage/"+sid, "Datastore.Audit") {
		if err := q.check("/storage/"+sid, "Datastore.AllocateSpace"); err != nil {
			return nil, err
		}
	}
	var out []map[string]any
	for _, id := range slices.Sorted(maps.Keys(st.volumes)) {
		v := st.volumes[id]
		if c := q.query.Get("content"); c != "" && c != v.Content {
			continue
		}
		if vm := q.query.Get("vmid"); vm != "" && vm != strconv.Itoa(v.Owner) {
			continue
		}
		e := map[string]any{"volid": v.VolID, "content": v.Content, "format": v.Format, "size": v.Size, "ctime": 1733140000}
		if v.Owner != 0 {
			e["vmid"] = v.Owner
		}
		out = append(out, e)
	}
	if out == nil {
		out = []map[string]any{}
	}
	return out, nil
}

// importExt is pve-storage's UPLOAD_IMPORT_EXT_RE_1 for download-url of
// content "import": a disk image (or an OVA).
var importExt = regexp.MustCompile(`^[A-Za-z0-9_.+-]+\.(qcow2|raw|vmdk|ova)$`)

// downloadURL is POST .../download-url (pve-storage PVE/API2/Storage/Status.pm
// download_url): Datastore.AllocateTemplate on the storage and Sys.Audit +
// Sys.Modify on / (or Sys.AccessNetwork on the node); the storage must be
// file based and configured for the content; an import file name must end
// in a disk image extension; the checksum is verified when given. The
// worker refuses a file that exists (PVE::Tools::download_file_from_url:
// "refusing to override existing file").
func (s *Server) downloadURL(q *req, h *Host, sid string, st *Storage) (any, *apiError) {
	if err := q.check("/storage/"+sid, "Datastore.AllocateTemplate"); err != nil {
		return nil, err
	}
	if err := q.checkAny([][2]string{{"/", "Sys.Audit"}, {"/", "Sys.Modify"}}, "/nodes/"+h.Name, "Sys.AccessNetwork"); err != nil {
		return nil, err
	}
	if st.Type != "dir" {
		return nil, fail(http.StatusInternalServerError, "can't upload to storage type '%s', not a file based storage!", st.Type)
	}
	content, name, u := q.form.Get("content"), q.form.Get("filename"), q.form.Get("url")
	if !slices.Contains(st.Content, content) {
		return nil, fail(http.StatusInternalServerError, "storage '%s' is not configured for content-type '%s'", sid, content)
	}
	format := "raw"
	switch content {
	case "import":
		m := importExt.FindStringSubmatch(name)
		if m == nil {
			return nil, paramErr("filename", "invalid filename or wrong extension")
		}
		format = m[1]
	case "iso":
		format = "iso"
	}
	volid := sid + ":" + content + "/" + name
	sum, algo := q.form.Get("checksum"), q.form.Get("checksum-algorithm")
	if sum != "" && algo != "sha256" {
		return nil, fail(http.StatusNotImplemented, "the double verifies sha256 only, not %q", algo)
	}
	digest := func(b []byte) string { d := sha256.Sum256(b); return hex.EncodeToString(d[:]) }
	upid := s.startTask(q, h.Name, "download", sid, s.TaskDuration, func() error {
		// pve-common PVE::Tools::download_file_from_url on a file that
		// exists: with a checksum, one that matches is kept ("OK, got
		// correct file already, no need to download"), another refused
		// ("checksum mismatch ..., aborting"); without one, refused
		// ("refusing to override existing file"). download_url never sets
		// allow_overwrite (pve-storage PVE/API2/Storage/Status.pm).
		if v, ok := st.volumes[volid]; ok {
			switch {
			case sum == "":
				// get_import_dir, get_iso_dir, get_vztmpl_dir of a dir storage.
				dir := map[string]string{"import": "import", "iso": "template/iso", "vztmpl": "template/cache"}[content]
				return fmt.Errorf("refusing to override existing file '%s/%s/%s'", st.Path, dir, name)
			case digest(v.Data) != strings.ToLower(sum):
				return fmt.Errorf("checksum mismatch: got '%s' != expect '%s', aborting", digest(v.Data), sum)
			}
			return nil
		}
		img, ok := s.images[u]
		if !ok {
			return fmt.Errorf("download failed: 404 Not Found")
		}
		if sum != "" && digest(img.Data) != strings.ToLower(sum) {
			return fmt.Errorf("checksum mismatch: got '%s' != expect '%s'", digest(img.Data), sum)
		}
		size := img.VirtualSize
		if size == 0 {
			size = int64(len(img.Data))
		}
		st.volumes[volid] = &Volume{VolID: volid, Content: content, Format: format, Size: int64(len(img.Data)), Data: img.Data, virtual: size}
		return nil
	})
	return upid, nil
}

// task serves /nodes/{node}/tasks/{upid}/status|log (pve-manager
// PVE/API2/Tasks.pm: the task's own user may read it, others need
// Sys.Audit on /nodes/{node}).
func (s *Server) task(q *req, h *Host, upid, what string) (any, *apiError) {
	t, ok := s.tasks[upid]
	if !ok || t.node != h.Name {
		return nil, fail(http.StatusInternalServerError, "unable to open file - No such file or directory")
	}
	if t.user != q.token.ID {
		if err := q.check("/nodes/"+h.Name, "Sys.Audit"); err != nil {
			return nil, err
		}
	}
	switch {
	case q.method == "GET" && what == "status":
		st := map[string]any{"upid": t.upid, "node": t.node, "type": t.typ, "id": t.id, "user": t.user,
			"pid": 0, "pstart": 0, "starttime": t.start.Unix(), "status": "running"}
		if t.applied {
			st["status"], st["exitstatus"] = "stopped", t.exit
		}
		return st, nil
	case q.method == "GET" && what == "log":
		var out []map[string]any
		for i, l := range t.log {
			out = append(out, map[string]any{"n": i + 1, "t": l})
		}
		return out, nil
	}
	return nil, fail(http.StatusNotImplemented, "Method '%s /nodes/%s/tasks/%s/%s' not implemented", q.method, h.Name, upid, what)
}

// stopTask is DELETE /nodes/{node}/tasks/{upid} (pve-manager
// PVE/API2/Tasks.pm stop_task): an unknown task is a parameter error ("no
// such task"); the task's own user may stop it, others need Sys.Modify on
// /nodes/{node}; a running worker is killed (check_worker with kill), a
// finished one is left as it ended. bpg calls it after a failed download
// (proxmox/nodes/tasks DeleteTask).
func (s *Server) stopTask(q *req, h *Host, upid string) (any, *apiError) {
	t, ok := s.tasks[upid]
	if !ok || t.node != h.Name {
		return nil, paramErr("upid", "no such task")
	}
	if t.user != q.token.ID {
		if err := q.check("/nodes/"+h.Name, "Sys.Modify"); err != nil {
			return nil, err
		}
	}
	if !t.applied {
		// Killed before its effect: the worker's TERM handler dies
		// "received interrupt" (pve-common PVE::RESTEnvironment
		// fork_worker), its exit status.
		t.applied, t.exit = true, "received interrupt"
		t.log = append(t.log, "TASK ERROR: received interrupt")
	}
	return nil, nil
}

// listQemu is GET /nodes/{node}/qemu: the node's guests the caller may audit.
func (s *Server) listQemu(q *req, h *Host) []map[string]any {
	out := []map[string]any{}
	for _, id := range slices.Sorted(maps.Keys(s.vms)) {
		v := s.vms[id]
		if v.Node == h.Name && (v.Type == "" || v.Type == "qemu") && q.can(fmt.Sprintf("/vms/%d", id), "VM.Audit") {
			out = append(out, map[string]any{"vmid": id, "name": v.Config["name"], "status": v.Status})
		}
	}
	return out
}

func atoiOr(s string, d int) int {
	if n, err := strconv.Atoi(s); err == nil {
		return n
	}
	return d
}

func memBytes(cfg map[string]string) int64 {
	return int64(atoiOr(cfg["memory"], 512)) << 20
}

// configDigest is the config's digest (qemu-server returns the SHA-1 of
// the config file as "digest").
func configDigest(cfg map[string]string) string {
	h := sha1.New() //nolint:gosec // see the import
	for _, k := range slices.Sorted(maps.Keys(cfg)) {
		_, _ = fmt.Fprintf(h, "%s: %s\n", k, cfg[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}
