package pveapi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	tokID  = "milner@pve!pulumi"
	secret = "3f0c9b1e-6a2d-4c8e-9f71-0d5b2a4e8c13"
	imgURL = "https://factory.talos.dev/image/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba/v1.9.5/nocloud-amd64.qcow2"
)

// full is every privilege the prod stack uses, without Datastore.Allocate.
var full = map[string][]string{
	"/":                       {"Sys.Audit", "Sys.Modify"},
	"/vms":                    {"VM.Allocate", "VM.Audit", "VM.Config.CDROM", "VM.Config.CPU", "VM.Config.Cloudinit", "VM.Config.Disk", "VM.Config.HWType", "VM.Config.Memory", "VM.Config.Network", "VM.Config.Options", "VM.PowerMgmt"},
	"/storage":                {"Datastore.AllocateSpace", "Datastore.AllocateTemplate", "Datastore.Audit"},
	"/sdn/zones/localnetwork": {"SDN.Use"},
}

// client is a test's PVE API caller.
type client struct {
	t    *testing.T
	base string
	hc   *http.Client
	auth string
}

func start(t *testing.T) (*Server, *client) {
	t.Helper()
	s := New(Host{Name: "pve-1", Address: "127.0.0.11", Gateway: "127.0.0.1"}, Host{Name: "pve-2", Address: "127.0.0.12", Gateway: "127.0.0.1"})
	s.UnauthorizedDelay = 0
	s.TaskDuration = 10 * time.Millisecond
	s.AddToken(Token{ID: tokID, Secret: secret, ACL: full})
	s.AddImage(imgURL, Image{Data: []byte("talos nocloud v1.9.5"), VirtualSize: 1 * GiB})
	srv := s.Start()
	t.Cleanup(srv.Close)
	return s, &client{t: t, base: srv.URL + "/api2/json", hc: srv.Client(), auth: "PVEAPIToken=" + tokID + "=" + secret}
}

// call sends one request and returns the status line and data.
func (c *client) call(method, path string, form url.Values) (string, json.RawMessage) {
	c.t.Helper()
	var body io.Reader
	if form != nil && method != http.MethodGet && method != http.MethodDelete {
		body = strings.NewReader(form.Encode())
	} else if form != nil {
		path += "?" + form.Encode()
	}
	req, err := http.NewRequest(method, c.base+path, body)
	require.NoError(c.t, err)
	req.Header.Set("Authorization", c.auth)
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := c.hc.Do(req)
	require.NoError(c.t, err)
	defer func() { _ = resp.Body.Close() }()
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&env)
	return resp.Status, env.Data
}

// ok sends a request that must succeed and returns its data.
func (c *client) ok(method, path string, form url.Values) json.RawMessage {
	c.t.Helper()
	st, data := c.call(method, path, form)
	require.Equal(c.t, "200 OK", st, "%s %s", method, path)
	return data
}

// wait polls a task as bpg's WaitForTask does and returns its exit status.
func (c *client) wait(node string, upid json.RawMessage) string {
	c.t.Helper()
	var id string
	require.NoError(c.t, json.Unmarshal(upid, &id))
	require.Regexp(c.t, `^UPID:`+node+`:[0-9A-F]{8}:[0-9A-F]{8}:[0-9A-F]{8}:\w+:[^:]*:[^:]+@[^:]+:$`, id)
	for range 200 {
		var st struct{ Status, Exitstatus string }
		require.NoError(c.t, json.Unmarshal(c.ok("GET", "/nodes/"+node+"/tasks/"+url.PathEscape(id)+"/status", nil), &st))
		if st.Status == "stopped" {
			return st.Exitstatus
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.t.Fatalf("task %s never ended", id)
	return ""
}

// TestAuthAsPVE: no header is 401 "No ticket", a wrong secret or unknown
// token 401 "Authentication failed!", a missing privilege 403 naming the
// path and privilege.
func TestAuthAsPVE(t *testing.T) {
	s, c := start(t)
	c.auth = ""
	st, _ := c.call("GET", "/version", nil)
	assert.Equal(t, "401 No ticket", st)
	c.auth = "PVEAPIToken=" + tokID + "=wrong"
	st, _ = c.call("GET", "/version", nil)
	assert.Equal(t, "401 Authentication failed!", st)
	c.auth = "PVEAPIToken=root@pam!other=" + secret
	st, _ = c.call("GET", "/version", nil)
	assert.Equal(t, "401 Authentication failed!", st)

	s.AddToken(Token{ID: "audit@pve!ro", Secret: "s", ACL: map[string][]string{"/": {"Sys.Audit"}, "/vms": {"VM.Audit"}}})
	c.auth = "PVEAPIToken=audit@pve!ro=s"
	st, _ = c.call("POST", "/nodes/pve-1/qemu", url.Values{"vmid": {"150"}, "memory": {"1024"}})
	assert.Equal(t, "403 Permission check failed (/vms/150, VM.Allocate)", st)
	for _, e := range s.Journal() {
		assert.NotContains(t, e.String(), secret, "the journal never holds a secret")
	}
	assert.Equal(t, []int{401, 401, 401, 403}, statuses(s.Journal()))
}

func statuses(j []Entry) []int {
	var out []int
	for _, e := range j {
		out = append(out, e.Status)
	}
	return out
}

// TestHolderPattern: the prod stack's shape end to end on the API: the
// image downloaded with its checksum; a holder importing it and owning a
// data disk, grown by resize; a node VM attaching both (no
// Datastore.Allocate: another VM's images volume needs Datastore.Audit and
// VM.Config.Disk on its owner, pve-storage check_volume_access); deleting
// the node VM, even with destroy-unreferenced-disks, frees none of the
// holder's volumes; the protected holder cannot be deleted; a shrink is
// refused.
func TestHolderPattern(t *testing.T) {
	s, c := start(t)
	sum := sha256.Sum256([]byte("talos nocloud v1.9.5"))
	bad := c.ok("POST", "/nodes/pve-1/storage/local/download-url", url.Values{"content": {"import"}, "filename": {"talos.qcow2"}, "url": {imgURL},
		"checksum": {strings.Repeat("0", 64)}, "checksum-algorithm": {"sha256"}})
	assert.Contains(t, c.wait("pve-1", bad), "checksum mismatch")
	dl := c.ok("POST", "/nodes/pve-1/storage/local/download-url", url.Values{"content": {"import"}, "filename": {"talos.qcow2"}, "url": {imgURL},
		"checksum": {hex.EncodeToString(sum[:])}, "checksum-algorithm": {"sha256"}})
	assert.Equal(t, "OK", c.wait("pve-1", dl))
	again := c.ok("POST", "/nodes/pve-1/storage/local/download-url", url.Values{"content": {"import"}, "filename": {"talos.qcow2"}, "url": {imgURL}})
	assert.Contains(t, c.wait("pve-1", again), "refusing to override existing file")
	// bpg then stops the task (DeleteTask): a finished task stays as it ended.
	var againID string
	require.NoError(t, json.Unmarshal(again, &againID))
	c.ok("DELETE", "/nodes/pve-1/tasks/"+url.PathEscape(againID), nil)
	assert.Contains(t, c.wait("pve-1", again), "refusing to override existing file")
	st, _ := c.call("DELETE", "/nodes/pve-1/tasks/"+url.PathEscape("UPID:pve-1:00000000:00000000:00000000:download:local:x@pve:"), nil)
	assert.Equal(t, "400 Parameter verification failed.", st)
	st, _ = c.call("POST", "/nodes/pve-1/storage/local/download-url", url.Values{"content": {"import"}, "filename": {"talos.iso"}, "url": {imgURL}})
	assert.Equal(t, "400 Parameter verification failed.", st)

	holder := c.ok("POST", "/nodes/pve-1/qemu", url.Values{"vmid": {"1150"}, "name": {"milner-prod-cp-1-disks"}, "protection": {"1"},
		"scsi0": {"local-lvm:0,import-from=local:import/talos.qcow2,format=raw"}, "scsi1": {"local-lvm:128,format=raw"}})
	assert.Equal(t, "OK", c.wait("pve-1", holder))
	cfg := s.VMs()[1150].Config
	assert.Equal(t, "local-lvm:vm-1150-disk-0,size=1G", cfg["scsi0"], "an imported disk takes the image's virtual size")
	assert.Equal(t, "local-lvm:vm-1150-disk-1,size=128G", cfg["scsi1"])
	assert.Equal(t, "OK", c.wait("pve-1", c.ok("PUT", "/nodes/pve-1/qemu/1150/resize", url.Values{"disk": {"scsi0"}, "size": {"64G"}})))
	st, _ = c.call("PUT", "/nodes/pve-1/qemu/1150/resize", url.Values{"disk": {"scsi0"}, "size": {"32G"}})
	assert.Equal(t, "500 shrinking disks is not supported", st)

	node := c.ok("POST", "/nodes/pve-1/qemu", url.Values{"vmid": {"150"}, "name": {"milner-prod-cp-1"}, "memory": {"16384"},
		"virtio0": {"local-lvm:vm-1150-disk-0,format=raw"}, "virtio1": {"local-lvm:vm-1150-disk-1"}, "ide2": {"local-lvm:cloudinit"},
		"ide3": {"file=cdrom,media=cdrom,"}, "ide1": {"file=none,media=cdrom,"}, "net0": {"virtio=BC:24:11:A8:01:50,bridge=vmbr0"}})
	assert.Equal(t, "OK", c.wait("pve-1", node))
	cfg = s.VMs()[150].Config
	assert.Equal(t, "local-lvm:vm-1150-disk-0,format=raw,size=64G", cfg["virtio0"], "an attached volume takes its current size")
	// bpg's CD-ROM drive as qemu-server's $create_disks writes it (print_drive).
	assert.Equal(t, "cdrom,media=cdrom", cfg["ide3"])
	assert.Equal(t, "none,media=cdrom", cfg["ide1"])
	assert.Equal(t, "OK", c.wait("pve-1", c.ok("POST", "/nodes/pve-1/qemu/150/status/start", nil)))
	st, _ = c.call("DELETE", "/nodes/pve-1/qemu/150", nil)
	assert.Equal(t, "500 VM 150 is running - destroy failed", st)
	assert.Equal(t, "OK", c.wait("pve-1", c.ok("POST", "/nodes/pve-1/qemu/150/status/shutdown", url.Values{"forceStop": {"1"}})))
	assert.Equal(t, "OK", c.wait("pve-1", c.ok("DELETE", "/nodes/pve-1/qemu/150", url.Values{"purge": {"1"}, "destroy-unreferenced-disks": {"1"}})))

	vols := s.Volumes("pve-1", "local-lvm")
	assert.Contains(t, vols, "local-lvm:vm-1150-disk-0")
	assert.Contains(t, vols, "local-lvm:vm-1150-disk-1")
	assert.NotContains(t, vols, "local-lvm:vm-150-cloudinit", "the node VM's own cloud-init drive is freed")
	assert.Equal(t, []byte("talos nocloud v1.9.5"), vols["local-lvm:vm-1150-disk-0"].Data, "the OS disk is the image's bytes")
	st, _ = c.call("DELETE", "/nodes/pve-1/qemu/1150", nil)
	assert.Equal(t, "500 can't remove VM 1150 - protection mode enabled", st)
}

// TestDestroyFreesOwnedDisks: a VM that owns its disks (the OpenTofu
// shape) loses them on destroy; destroy-unreferenced-disks also frees a
// volume of its id that no config names; a volume it owns but another VM
// attached goes too (PVE checks the owner, not the users).
func TestDestroyFreesOwnedDisks(t *testing.T) {
	s, c := start(t)
	assert.Equal(t, "OK", c.wait("pve-2", c.ok("POST", "/nodes/pve-2/qemu", url.Values{"vmid": {"151"}, "virtio0": {"local-lvm:8"}})))
	s.PutVolume("pve-2", "local-lvm", Volume{VolID: "local-lvm:vm-151-disk-7", Content: "images", Owner: 151, Format: "raw", Size: GiB})
	assert.Equal(t, "OK", c.wait("pve-2", c.ok("POST", "/nodes/pve-2/qemu", url.Values{"vmid": {"152"}, "virtio0": {"local-lvm:vm-151-disk-0"}})))
	assert.Equal(t, "OK", c.wait("pve-2", c.ok("DELETE", "/nodes/pve-2/qemu/151", url.Values{"destroy-unreferenced-disks": {"0"}})))
	vols := s.Volumes("pve-2", "local-lvm")
	assert.NotContains(t, vols, "local-lvm:vm-151-disk-0", "freed although VM 152 still attaches it")
	assert.Contains(t, vols, "local-lvm:vm-151-disk-7", "unreferenced, kept without destroy-unreferenced-disks")
}

// TestResourcesAndNetwork: the cluster's guests (as VM.Audit allows),
// nextid, and a host's network with its vmbr0 address.
func TestResourcesAndNetwork(t *testing.T) {
	s, c := start(t)
	s.AddVM(VM{VMID: 300, Node: "pve-2", Type: "lxc", Status: "running", Config: map[string]string{"name": "pihole"}})
	s.AddVM(VM{VMID: 150, Node: "pve-1", Status: "running", Config: map[string]string{"name": "talos-cp-1"}})
	var res []map[string]any
	require.NoError(t, json.Unmarshal(c.ok("GET", "/cluster/resources", url.Values{"type": {"vm"}}), &res))
	require.Len(t, res, 2)
	assert.Equal(t, "qemu/150", res[0]["id"])
	assert.Equal(t, "lxc/300", res[1]["id"])
	st, _ := c.call("GET", "/cluster/nextid", url.Values{"vmid": {"150"}})
	assert.Equal(t, "400 Parameter verification failed.", st)
	assert.JSONEq(t, `"151"`, string(c.ok("GET", "/cluster/nextid", url.Values{"vmid": {"151"}})))
	st, _ = c.call("GET", "/nodes/pve-1/qemu/300/config", nil)
	assert.Equal(t, "500 Configuration file 'nodes/pve-1/qemu-server/300.conf' does not exist", st)
	assert.Regexp(t, regexp.MustCompile(`"address":"127.0.0.12"`), string(c.ok("GET", "/nodes/pve-2/network", nil)))
}

// TestDownloadOverAnExistingFile: download_url on a file that exists
// (PVE::Tools::download_file_from_url) keeps it when the checksum given
// matches, refuses a mismatch and, without a checksum, refuses to
// override it; the file deleted by its volume id with the slash escaped
// (as bpg's DeleteDatastoreFile sends it, not waiting for the task) is
// gone for a download started after the delete.
func TestDownloadOverAnExistingFile(t *testing.T) {
	s, c := start(t)
	sum := sha256.Sum256([]byte("talos nocloud v1.9.5"))
	form := func(checksum string) url.Values {
		f := url.Values{"content": {"import"}, "filename": {"talos.qcow2"}, "url": {imgURL}}
		if checksum != "" {
			f.Set("checksum", checksum)
			f.Set("checksum-algorithm", "sha256")
		}
		return f
	}
	download := func(checksum string) string {
		return c.wait("pve-1", c.ok("POST", "/nodes/pve-1/storage/local/download-url", form(checksum)))
	}
	require.Equal(t, "OK", download(hex.EncodeToString(sum[:])))
	assert.Equal(t, "OK", download(hex.EncodeToString(sum[:])), "the same file, its checksum given: kept")
	assert.Contains(t, download(strings.Repeat("ab", 32)), "checksum mismatch", "another checksum")
	assert.Equal(t, "refusing to override existing file '/var/lib/vz/import/talos.qcow2'", download(""))
	del := "/nodes/pve-1/storage/local/content/" + url.PathEscape("import/talos.qcow2")
	st, _ := c.call("DELETE", del, nil)
	assert.Equal(t, "403 Permission check failed (/storage/local, Datastore.Allocate)", st)
	acl := maps.Clone(full)
	acl["/storage"] = append(slices.Clone(acl["/storage"]), "Datastore.Allocate")
	s.AddToken(Token{ID: tokID, Secret: secret, ACL: acl})
	c.ok("DELETE", del, nil)
	assert.Equal(t, "OK", download(""), "downloaded again after the delete")
	assert.Contains(t, s.Volumes("pve-1", "local"), "local:import/talos.qcow2")
}
