package tests

// Prod on a Proxmox VE cluster: placement of nodes over hosts, per-host
// images, holder co-location and adoption, TLS by default, and the
// empty-state/orphan guard and privilege preflight against the PVE API
// double (tests/pveapi). Helpers are prefixed "pxc".

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/components/substrate"
	"github.com/milner/milner/internal/guard"
	"github.com/milner/milner/internal/offline"
	"github.com/milner/milner/internal/pve"
	"github.com/milner/milner/stacks"
	"github.com/milner/milner/stacks/config"
	"github.com/milner/milner/tests/offlinetest"
	"github.com/milner/milner/tests/pveapi"
)

// pxcSource serves raw config to config.Load, with the prod secrets secret.
type pxcSource map[string]string

func (s pxcSource) GetConfig(k string) (string, bool) { v, ok := s[k]; return v, ok }
func (s pxcSource) IsConfigSecret(k string) bool      { _, ok := prodSecrets[k]; return ok }

// pxcRun runs the program on cfg and returns the error.
func pxcRun(cfg map[string]string) error {
	_, err := offline.Run(stacks.Program, "prod", cfg, slices.Collect(maps.Keys(prodSecrets))...)
	return err
}

// pxcEditNodes patches milner:nodes of cfg.
func pxcEditNodes(t *testing.T, cfg map[string]string, edit func(nodes []any)) map[string]string {
	return patchKey(t, cfg, "milner:nodes", func(v any) { edit(v.([]any)) })
}

// pxcEditProxmox patches milner:substrate.proxmox of cfg.
func pxcEditProxmox(t *testing.T, cfg map[string]string, edit func(px map[string]any)) map[string]string {
	return patchKey(t, cfg, "milner:substrate", func(v any) { edit(v.(map[string]any)["proxmox"].(map[string]any)) })
}

// TestProdPlacement: every node VM and its holder run on the node's own
// host; the holder's disks and the cloud-init drive on that host's
// datastores; the holder's OS disk comes from that host's image.
func TestProdPlacement(t *testing.T) {
	rec := runStack(t, "prod", stackConfig(t, "prod", prodSecrets))
	for _, n := range prodNodes {
		node := prodVM(t, rec, "milner-prod-"+n.name)
		holder := prodVM(t, rec, "milner-prod-"+n.name+"-disks")
		assert.Equal(t, n.host, node.Inputs["nodeName"].StringValue(), n.name)
		assert.Equal(t, n.host, holder.Inputs["nodeName"].StringValue(), "%s: the holder lives on its node VM's host", n.name)
		assert.NotContains(t, holder.Inputs, "migrate", "a host change of a holder must plan a replace (refused), never a silent migration")
		hd := prodDisks(t, holder)
		require.Len(t, hd, 2)
		assert.Equal(t, "milner-prod-"+n.host+"-image-"+stackCluster(t, "prod").TalosVersion+"-id", hd[0]["importFrom"].StringValue(), n.name)
		for i, d := range prodDisks(t, node) {
			assert.Equal(t, hd[i]["datastoreId"], d["datastoreId"], "%s disk %d: the node VM attaches from the holder's datastore", n.name, i)
		}
		assert.Equal(t, "local-lvm", node.Inputs["initialization"].ObjectValue()["datastoreId"].StringValue())
	}
}

// TestProdImagePerHost: one download per host that runs a node, each on
// its host; the default host's image keeps the single-host name as an alias.
func TestProdImagePerHost(t *testing.T) {
	rec := runStack(t, "prod", stackConfig(t, "prod", prodSecrets))
	images := rec.ByType(prodTImage)
	require.Len(t, images, 3)
	for i, img := range images {
		host := fmt.Sprintf("pve-%d", i+1)
		assert.Equal(t, "milner-prod-"+host+"-image-"+stackCluster(t, "prod").TalosVersion, img.Name)
		assert.Equal(t, host, img.Inputs["nodeName"].StringValue(), img.Name)
		assert.Equal(t, "local", img.Inputs["datastoreId"].StringValue(), img.Name)
		want := 0
		if host == "pve-1" {
			want = 1 // the stack's nodeName: aliased from milner-prod-image-<talosVersion>
		}
		assert.Equal(t, want, img.Options.Aliases, img.Name)
	}

	// A stack on one host (every node on the default) downloads once.
	one := pxcEditNodes(t, stackConfig(t, "prod", prodSecrets), func(nodes []any) {
		for _, n := range nodes {
			delete(n.(map[string]any), "proxmoxNode")
		}
	})
	single := runStack(t, "prod", one)
	assert.Equal(t, []string{"milner-prod-pve-1-image-" + stackCluster(t, "prod").TalosVersion}, prodNames(single.ByType(prodTImage)))
}

// TestProdControlPlanesSpreadOverHosts: with several hosts, two control
// planes on one host are refused, or with the override only a warning.
func TestProdControlPlanesSpreadOverHosts(t *testing.T) {
	shared := pxcEditNodes(t, stackConfig(t, "prod", prodSecrets), func(nodes []any) {
		nodes[2].(map[string]any)["proxmoxNode"] = "pve-1"
	})
	err := pxcRun(shared)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `milner:nodes[2].proxmoxNode: control plane on host "pve-1" with nodes[0]`)

	allowed := pxcEditProxmox(t, shared, func(px map[string]any) { px["allowControlPlanesOnOneHost"] = true })
	require.NoError(t, pxcRun(allowed))
	cfg, err := config.Load(pxcSource(allowed))
	require.NoError(t, err)
	assert.Contains(t, strings.Join(cfg.Warnings, "\n"), `milner:nodes[2].proxmoxNode: control plane on host "pve-1" with nodes[0] (allowControlPlanesOnOneHost)`)

	// One host for all: a homelab by choice, no refusal.
	oneHost := pxcEditNodes(t, stackConfig(t, "prod", prodSecrets), func(nodes []any) {
		for _, n := range nodes {
			n.(map[string]any)["proxmoxNode"] = "pve-2"
		}
	})
	require.NoError(t, pxcRun(oneHost))

	bad := pxcEditNodes(t, stackConfig(t, "prod", prodSecrets), func(nodes []any) {
		nodes[1].(map[string]any)["proxmoxNode"] = "pve 2"
	})
	err = pxcRun(bad)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `milner:nodes[1].proxmoxNode: "pve 2" is not a Proxmox VE node name`)
}

// TestProdHolderAdoptionIsImported: holderAdoptId imports the existing
// holder under "<host>/<vmId+1000>"; a wrong id is refused by name.
func TestProdHolderAdoptionIsImported(t *testing.T) {
	cfg := pxcEditNodes(t, stackConfig(t, "prod", prodSecrets), func(nodes []any) {
		nodes[1].(map[string]any)["holderAdoptId"] = "1151"
		nodes[1].(map[string]any)["adoptId"] = "151"
	})
	rec := runStack(t, "prod", cfg)
	for _, r := range rec.Registrations() {
		want := ""
		switch {
		case r.Type == prodTVM && r.Name == "milner-prod-cp-2-disks":
			want = "pve-2/1151"
		case r.Type == prodTVM && r.Name == "milner-prod-cp-2":
			want = "pve-2/151"
		}
		assert.Equal(t, want, r.Options.ImportID, "%s %s", r.Type, r.Name)
		// An adopted VM also ignores what bpg's import cannot read back;
		// a VM Milner created does not.
		switch {
		case r.Type == prodTVM && r.Name == "milner-prod-cp-2-disks":
			assert.Equal(t, slices.Concat(substrate.ProxmoxHolderIgnoredChanges, substrate.ProxmoxHolderImportUnread), r.Options.IgnoreChanges)
		case r.Type == prodTVM && r.Name == "milner-prod-cp-2":
			assert.Equal(t, slices.Concat(substrate.ProxmoxNodeIgnoredChanges, substrate.ProxmoxNodeImportUnread), r.Options.IgnoreChanges)
		case r.Type == prodTVM && strings.HasSuffix(r.Name, "-disks"):
			assert.Equal(t, substrate.ProxmoxHolderIgnoredChanges, r.Options.IgnoreChanges, r.Name)
		case r.Type == prodTVM:
			assert.Equal(t, substrate.ProxmoxNodeIgnoredChanges, r.Options.IgnoreChanges, r.Name)
		}
	}
	wrong := pxcEditNodes(t, stackConfig(t, "prod", prodSecrets), func(nodes []any) {
		nodes[0].(map[string]any)["holderAdoptId"] = "150"
	})
	err := pxcRun(wrong)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `milner:nodes[0].holderAdoptId: "150" is not this node's disk holder VM id 1150`)
}

// TestProdTLSVerifiedByDefault: the committed stack verifies TLS; insecure
// needs its acknowledgement and then warns on every run; the PVE client
// refuses a certificate it cannot verify.
func TestProdTLSVerifiedByDefault(t *testing.T) {
	rec := runStack(t, "prod", stackConfig(t, "prod", prodSecrets))
	prov := rec.ByType(prodTProvider)
	require.Len(t, prov, 1)
	assert.False(t, prov[0].Inputs["insecure"].BoolValue(), "TLS verification is on in the committed prod stack")

	insecure := pxcEditProxmox(t, stackConfig(t, "prod", prodSecrets), func(px map[string]any) { px["insecure"] = true })
	err := pxcRun(insecure)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "milner:substrate.proxmox.insecure: skips TLS verification")

	acked := pxcEditProxmox(t, insecure, func(px map[string]any) { px["insecureAcknowledged"] = true })
	cfg, err := config.Load(pxcSource(acked))
	require.NoError(t, err)
	assert.Contains(t, strings.Join(cfg.Warnings, "\n"), "milner:substrate.proxmox.insecure: TLS verification of https://pve-1.home.arpa:8006/ is OFF")

	_, srv := pxcDouble(t, pxcFullACL, nil)
	c, err := pve.New(srv.URL, prodSecrets["milner:proxmoxApiToken"], false, nil)
	require.NoError(t, err)
	_, err = c.VMs(context.Background())
	require.Error(t, err, "a self-signed certificate is not trusted by default")
	assert.Contains(t, err.Error(), "certificate")
}

// pxcHosts are the prod stack's three PVE hosts as the double serves
// them: vmbr0 on loopback addresses (the tests never dial them).
var pxcHosts = []pveapi.Host{
	{Name: "pve-1", Address: "127.0.0.11", Gateway: "127.0.0.1"},
	{Name: "pve-2", Address: "127.0.0.12", Gateway: "127.0.0.1"},
	{Name: "pve-3", Address: "127.0.0.13", Gateway: "127.0.0.1"},
}

// pxcFullACL is every privilege the program needs (pve.Needs), as a token
// granted them on the parents of the paths.
var pxcFullACL = map[string][]string{
	"/":                       {"Sys.Audit", "Sys.Modify"},
	"/vms":                    {"VM.Allocate", "VM.Audit", "VM.Config.CDROM", "VM.Config.CPU", "VM.Config.Cloudinit", "VM.Config.Disk", "VM.Config.HWType", "VM.Config.Memory", "VM.Config.Network", "VM.Config.Options", "VM.Migrate", "VM.PowerMgmt"},
	"/storage":                {"Datastore.Allocate", "Datastore.AllocateSpace", "Datastore.AllocateTemplate", "Datastore.Audit"},
	"/sdn/zones/localnetwork": {"SDN.Use"},
}

// pxcDouble starts the PVE API double (tests/pveapi) with the prod hosts
// and the prod stack's token granted acl, seeded by seed.
func pxcDouble(t *testing.T, acl map[string][]string, seed func(*pveapi.Server)) (*pveapi.Server, *httptest.Server) {
	t.Helper()
	s := pveapi.New(pxcHosts...)
	s.UnauthorizedDelay = 0
	id, secret, _ := strings.Cut(prodSecrets["milner:proxmoxApiToken"], "=")
	s.AddToken(pveapi.Token{ID: id, Secret: secret, ACL: acl})
	if seed != nil {
		seed(s)
	}
	srv := s.Start()
	t.Cleanup(srv.Close)
	return s, srv
}

// pxcClient returns a client that trusts srv's certificate, as a PVE CA
// given through SSL_CERT_FILE would be trusted.
func pxcClient(t *testing.T, srv *httptest.Server) *pve.Client {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	c, err := pve.New(srv.URL, prodSecrets["milner:proxmoxApiToken"], false, roots)
	require.NoError(t, err)
	return c
}

// pxcOpenTofu is the old cluster as the OpenTofu code left it: VMs 150-152
// named talos-cp-N, one per host, each owning its two disks and its
// cloud-init drive; plus a guest and a container that are not the stack's.
func pxcOpenTofu(s *pveapi.Server) {
	for i, host := range []string{"pve-1", "pve-2", "pve-3"} {
		id := 150 + i
		vol := func(n string) string { return fmt.Sprintf("local-lvm:vm-%d-%s", id, n) }
		for n, size := range map[string]int64{"disk-0": 64, "disk-1": 128} {
			s.PutVolume(host, "local-lvm", pveapi.Volume{VolID: vol(n), Content: "images", Owner: id, Format: "raw", Size: size * pveapi.GiB})
		}
		s.PutVolume(host, "local-lvm", pveapi.Volume{VolID: vol("cloudinit"), Content: "images", Owner: id, Format: "raw", Size: 4 << 20})
		s.AddVM(pveapi.VM{VMID: id, Node: host, Status: "running", Config: map[string]string{
			"name": fmt.Sprintf("talos-cp-%d", i+1), "cores": "6", "cpu": "x86-64-v2-AES", "memory": "16384", "ostype": "l26",
			"agent": "0", "onboot": "1", "boot": "order=virtio0",
			"virtio0": vol("disk-0") + ",size=64G", "virtio1": vol("disk-1") + ",size=128G", "ide2": vol("cloudinit") + ",media=cdrom",
			"net0":      fmt.Sprintf("virtio=BC:24:11:A8:01:%d,bridge=vmbr0", 50+i),
			"ipconfig0": fmt.Sprintf("ip=192.168.1.%d/24,gw=192.168.1.1", 50+i), "nameserver": "192.168.1.1",
			"serial0": "socket", "scsihw": "virtio-scsi-pci",
		}})
	}
	s.AddVM(pveapi.VM{VMID: 200, Node: "pve-1", Status: "running", Config: map[string]string{"name": "home-assistant", "memory": "4096"}})
	s.AddVM(pveapi.VM{VMID: 300, Node: "pve-2", Type: "lxc", Status: "running", Config: map[string]string{"name": "pihole"}})
}

// prodDeclared is what a preview of a clean install of the committed prod
// stack declares: the program's registrations, stopped after the substrate
// layer, as the preview's create steps the guard reads.
func prodDeclared(t *testing.T) []guard.Declared {
	t.Helper()
	cfg := stackConfig(t, "prod", nil)
	cfg["milner:stopAfter"] = "substrate"
	cfg["milner:"+config.ProxmoxTokenKey] = "guard@pve!declared=mock"
	rec, err := offline.Run(stacks.Program, "prod", cfg, "milner:"+config.ProxmoxTokenKey)
	require.NoError(t, err)
	declared, err := guard.DeclaredBy(offlinetest.Steps(rec), "milner-prod")
	require.NoError(t, err)
	return declared
}

// pxcGuard runs the guard of the committed prod stack against api with the
// given logical names in state.
func pxcGuard(t *testing.T, seed func(*pveapi.Server), inState ...string) []guard.Finding {
	t.Helper()
	ctx := context.Background()
	_, srv := pxcDouble(t, pxcFullACL, seed)
	c := pxcClient(t, srv)
	declared := prodDeclared(t)
	live, err := guard.ListProxmox(ctx, c)
	require.NoError(t, err)
	configOf := func(host string, vmid int) map[string]any {
		cfg, err := c.VMConfig(ctx, host, vmid)
		if err != nil {
			return nil
		}
		return cfg
	}
	state := guard.State{}
	for _, s := range inState {
		state[guard.Ref{Type: prodTVM, Logical: s}] = guard.Object{}
	}
	return guard.Check("prod", declared, state, live, configOf)
}

// TestProdGuardRefusesEmptyStateOverTheOldCluster: a fresh workstation
// (empty state) facing the OpenTofu cluster's live VMs, which carry the
// stack's VM ids: the up is refused, with the commands that hand each VM's
// disks to a holder without copying them and adopt both.
func TestProdGuardRefusesEmptyStateOverTheOldCluster(t *testing.T) {
	findings := pxcGuard(t, pxcOpenTofu)
	require.Len(t, findings, 4, "empty state + one finding per live node VM")
	assert.Contains(t, findings[0].Problem, `the state of stack "prod" holds no substrate resource, but 3 of its VMs live on the Proxmox cluster`)
	assert.Contains(t, findings[1].Problem, `Proxmox VM 150 "talos-cp-1" on pve-1 matches milner-prod-cp-1`)
	assert.Equal(t, strings.Join([]string{
		"ssh root@pve-1 qm create 1150 --name milner-prod-cp-1-disks --onboot 0 --protection 1",
		"ssh root@pve-1 qm shutdown 150",
		"ssh root@pve-1 qm disk move 150 virtio0 --target-vmid 1150 --target-disk scsi0",
		"ssh root@pve-1 qm disk move 150 virtio1 --target-vmid 1150 --target-disk scsi1",
		"ssh root@pve-1 qm set 150 --virtio0 local-lvm:vm-1150-disk-0 --virtio1 local-lvm:vm-1150-disk-1 --boot order=virtio0",
		"milner adopt --stack prod --node cp-1 --holder --id 1150",
		"milner adopt --stack prod --node cp-1 --id 150",
	}, " && "), findings[1].Fix)
	assert.Contains(t, findings[3].Fix, "ssh root@pve-3 qm disk move 152 virtio1 --target-vmid 1152 --target-disk scsi1")
	assert.Contains(t, findings[0].Fix, findings[2].Fix, "the empty-state fix lists every adoption")
}

// TestProdGuardEmptiesCDROMBeforeAdoption: a holder and node VM in
// Milner's shape made before the program declared the CD-ROM drive empty
// hold bpg's default "cdrom" on ide3 (the cloud-init drive on ide2 is the
// VM's own): the fix empties it before each adoption, since bpg's import
// would read it as a disk and plan a replace.
func TestProdGuardEmptiesCDROMBeforeAdoption(t *testing.T) {
	findings := pxcGuard(t, func(s *pveapi.Server) {
		for _, n := range []string{"disk-0", "disk-1"} {
			s.PutVolume("pve-1", "local-lvm", pveapi.Volume{VolID: "local-lvm:vm-1150-" + n, Content: "images", Owner: 1150, Format: "raw", Size: 64 * pveapi.GiB})
		}
		s.AddVM(pveapi.VM{VMID: 1150, Node: "pve-1", Status: "stopped", Config: map[string]string{"name": "milner-prod-cp-1-disks",
			"scsi0": "local-lvm:vm-1150-disk-0,size=64G", "scsi1": "local-lvm:vm-1150-disk-1,size=64G", "ide3": "cdrom,media=cdrom"}})
		s.AddVM(pveapi.VM{VMID: 150, Node: "pve-1", Status: "running", Config: map[string]string{"name": "milner-prod-cp-1",
			"virtio0": "local-lvm:vm-1150-disk-0,size=64G", "virtio1": "local-lvm:vm-1150-disk-1,size=64G",
			"ide2": "local-lvm:vm-150-cloudinit,media=cdrom", "ide3": "cdrom,media=cdrom"}})
	}, "milner-prod-cp-2-disks", "milner-prod-cp-2", "milner-prod-cp-3-disks", "milner-prod-cp-3")
	var fixes []string
	for _, f := range findings {
		fixes = append(fixes, f.Fix)
	}
	assert.Contains(t, fixes, "ssh root@pve-1 qm set 1150 --ide3 none,media=cdrom && milner adopt --stack prod --node cp-1 --holder --id 1150")
	assert.Contains(t, fixes, "ssh root@pve-1 qm set 150 --ide3 none,media=cdrom && milner adopt --stack prod --node cp-1 --id 150")
}

// TestProdGuardNamesOrphanHolder: a crash left cp-3's holder created but
// out of state; the guard names the exact holder adoption. A converged
// state, or a VM being adopted, passes.
func TestProdGuardNamesOrphanHolder(t *testing.T) {
	declared := prodDeclared(t)
	var live []guard.Object
	for _, d := range declared {
		live = append(live, guard.Object{Type: prodTVM, ID: strconv.Itoa(d.VMID), Name: d.Name, Host: d.Host})
	}
	inState := func(except string) guard.State {
		s := guard.State{}
		for _, d := range declared {
			if d.Logical != except {
				s[guard.Ref{Type: d.Type, Logical: d.Logical}] = guard.Object{}
			}
		}
		return s
	}
	noConfig := func(string, int) map[string]any { return nil }

	assert.Empty(t, guard.Check("prod", declared, inState(""), live, noConfig), "converged")
	f := guard.Check("prod", declared, inState("milner-prod-cp-3-disks"), live, noConfig)
	require.Len(t, f, 1)
	assert.Equal(t, "milner adopt --stack prod --node cp-3 --holder --id 1152", f[0].Fix)

	for i := range declared {
		if declared[i].Logical == "milner-prod-cp-3-disks" {
			declared[i].ImportID = "pve-3/1152"
		}
	}
	assert.Empty(t, guard.Check("prod", declared, inState("milner-prod-cp-3-disks"), live, noConfig), "a holder being adopted is no orphan")
}

// TestProdPreflightNamesMissingPrivileges: the token's effective
// privileges, read from /access/permissions, lack SDN.Use, which is named;
// lacking Datastore.Allocate is fine (TestProdNeedsAreEnough).
func TestProdPreflightNamesMissingPrivileges(t *testing.T) {
	ctx := context.Background()
	plan := pve.Plan{VMIDs: []int{150, 1150}, DiskDatastores: []string{"local-lvm", "local-lvm"}, ImageDatastore: "local", Bridge: "vmbr0"}
	// A PVEVMAdmin-like token without Datastore.Allocate and SDN.Use.
	short := map[string][]string{
		"/":        {"Sys.Audit", "Sys.Modify"},
		"/vms":     {"VM.Allocate", "VM.Audit", "VM.Backup", "VM.Clone", "VM.Config.CDROM", "VM.Config.CPU", "VM.Config.Cloudinit", "VM.Config.Disk", "VM.Config.HWType", "VM.Config.Memory", "VM.Config.Network", "VM.Config.Options", "VM.Console", "VM.Migrate", "VM.PowerMgmt", "VM.Snapshot"},
		"/storage": {"Datastore.AllocateSpace", "Datastore.AllocateTemplate", "Datastore.Audit"},
	}
	for _, tc := range []struct {
		name string
		acl  map[string][]string
		want []string
	}{
		{"short", short, []string{"SDN.Use on /sdn/zones/localnetwork/vmbr0"}},
		{"full", pxcFullACL, nil},
	} {
		_, srv := pxcDouble(t, tc.acl, nil)
		perms, err := pxcClient(t, srv).Permissions(ctx)
		require.NoError(t, err, tc.name)
		var got []string
		for _, m := range pve.Missing(perms, pve.Needs(plan)) {
			got = append(got, m.Priv+" on "+m.Path)
		}
		assert.Equal(t, tc.want, got, tc.name)
	}
}

// pxcCall sends one request to the double as bpg does (urlencoded form)
// and returns PVE's status line and the reply's data.
func pxcCall(t *testing.T, srv *httptest.Server, method, path string, form url.Values) (string, json.RawMessage) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+"/api2/json"+path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Authorization", "PVEAPIToken="+prodSecrets["milner:proxmoxApiToken"])
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&env)
	return resp.Status, env.Data
}

// pxcTask sends a request that starts a task and waits for its end, as
// bpg's WaitForTask polls it; it returns the exit status.
func pxcTask(t *testing.T, srv *httptest.Server, node, method, path string, form url.Values) string {
	t.Helper()
	st, data := pxcCall(t, srv, method, path, form)
	require.Equal(t, "200 OK", st, "%s %s", method, path)
	var upid string
	require.NoError(t, json.Unmarshal(data, &upid))
	for range 500 {
		var ts struct{ Status, Exitstatus string }
		st, data := pxcCall(t, srv, http.MethodGet, "/nodes/"+node+"/tasks/"+url.PathEscape(upid)+"/status", nil)
		require.Equal(t, "200 OK", st)
		require.NoError(t, json.Unmarshal(data, &ts))
		if ts.Status == "stopped" {
			return ts.Exitstatus
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("task %s never ended", upid)
	return ""
}

// TestProdNeedsAreEnough: a token granted exactly what the preflight asks
// (pve.Needs, each privilege on its own path, nothing on a parent) can
// make one node's substrate on the PVE double: the image download, the
// holder importing it, its resize, the node VM attaching the holder's
// disks with its NIC on the bridge, the start. The double checks each
// call as PVE does (tests/pveapi), so a need dropped from the list is a
// refusal here.
func TestProdNeedsAreEnough(t *testing.T) {
	plan := pve.Plan{VMIDs: []int{150, 1150}, DiskDatastores: []string{"local-lvm", "local-lvm"}, ImageDatastore: "local", Bridge: "vmbr0"}
	acl := map[string][]string{}
	for _, n := range pve.Needs(plan) {
		acl[n.Path] = append(acl[n.Path], n.Priv)
	}
	// Reading a task of one's own and the host's network are not in the
	// plan: bpg reads the network only for SSH, which the snippet needs.
	const url1 = "https://factory.talos.dev/image/x/v1.9.5/nocloud-amd64.qcow2"
	_, srv := pxcDouble(t, acl, func(s *pveapi.Server) {
		s.TaskDuration = time.Millisecond
		s.AddImage(url1, pveapi.Image{Data: []byte("talos"), VirtualSize: pveapi.GiB})
		// The snippet, as bpg's upload over SSH leaves it (PVE's start
		// reads it: tests/pveengine uploads it through the real plugin).
		s.PutVolume("pve-1", "local", pveapi.Volume{VolID: "local:snippets/milner-prod-cp-1-talos.yaml", Content: "snippets", Format: "snippet", Size: 9, Data: []byte("machine:\n"), Mode: 0o600})
	})
	assert.Equal(t, "OK", pxcTask(t, srv, "pve-1", "POST", "/nodes/pve-1/storage/local/download-url",
		url.Values{"content": {"import"}, "filename": {"milner-prod-talos-v1.9.5-0a1b2c3d.qcow2"}, "url": {url1}}))
	assert.Equal(t, "OK", pxcTask(t, srv, "pve-1", "POST", "/nodes/pve-1/qemu", url.Values{"vmid": {"1150"},
		"name": {"milner-prod-cp-1-disks"}, "protection": {"1"}, "onboot": {"0"},
		"scsi0": {"local-lvm:0,import-from=local:import/milner-prod-talos-v1.9.5-0a1b2c3d.qcow2,format=raw"},
		"scsi1": {"local-lvm:128,format=raw"}}))
	assert.Equal(t, "OK", pxcTask(t, srv, "pve-1", "PUT", "/nodes/pve-1/qemu/1150/resize", url.Values{"disk": {"scsi0"}, "size": {"64G"}}))
	assert.Equal(t, "OK", pxcTask(t, srv, "pve-1", "POST", "/nodes/pve-1/qemu", url.Values{"vmid": {"150"},
		"name": {"milner-prod-cp-1"}, "cores": {"6"}, "cpu": {"x86-64-v2-AES"}, "memory": {"16384"}, "ostype": {"l26"},
		"virtio0": {"local-lvm:vm-1150-disk-0,format=raw"}, "virtio1": {"local-lvm:vm-1150-disk-1,format=raw"},
		"ide2": {"local-lvm:cloudinit"}, "ipconfig0": {"ip=192.168.1.50/24,gw=192.168.1.1"}, "nameserver": {"192.168.1.1"},
		"cicustom": {"user=local:snippets/milner-prod-cp-1-talos.yaml"}, "serial0": {"socket"}, "boot": {"order=virtio0"},
		"net0": {"virtio=BC:24:11:A8:01:50,bridge=vmbr0"}}))
	assert.Equal(t, "OK", pxcTask(t, srv, "pve-1", "POST", "/nodes/pve-1/qemu/150/status/start", nil))
}
