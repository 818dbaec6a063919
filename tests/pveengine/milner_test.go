//go:build integration

package pveengine

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/stacks"
	"github.com/milner/milner/stacks/config"
	"github.com/milner/milner/tests/clusterapi"
	"github.com/milner/milner/tests/harness"
	"github.com/milner/milner/tests/pveapi"
	"github.com/milner/milner/tests/talosapi"
)

// prodNode is a node of the prod stack: name, host, address, VM id.
type prodNode struct {
	name, host, addr string
	vmid             int
	controlPlane     bool
}

// mac is the node's MAC in the stack file, and its double's (the config's
// deviceSelector must match it: talosapi WithMAC).
func (n prodNode) mac() string { return fmt.Sprintf("bc:24:11:a8:01:%d", n.vmid-100) }

// The prod stack's nodes (Pulumi.prod.yaml).
var prodNodes = []prodNode{
	{"cp-1", "pve-1", "192.168.1.50", 150, true},
	{"cp-2", "pve-2", "192.168.1.51", 151, true},
	{"cp-3", "pve-3", "192.168.1.52", 152, true},
}

// learnerPromotion is how long a joining control plane stays an etcd
// learner in the Talos doubles (talosapi.WithLearnerPromotion).
const learnerPromotion = 1500 * time.Millisecond

// addedWorker and addedControlPlane are the nodes the scenario adds to
// the running cluster, in that order.
var (
	addedWorker       = prodNode{"w-1", "pve-1", "192.168.1.53", 153, false}
	addedControlPlane = prodNode{"cp-4", "pve-2", "192.168.1.54", 154, true}
)

// prodVIP is the prod cluster's VIP (Pulumi.prod.yaml).
const prodVIP = "192.168.1.60"

// imageURL is the prod stack's Talos image at a version.
func imageURL(version string) string {
	return fmt.Sprintf("https://factory.talos.dev/image/%s/%s/nocloud-amd64.qcow2", config.DefaultSchematic, version)
}

// prod is the prod stack's world inside the namespace: the PVE double on
// pve-1:8006 (any host answers for the cluster), each host's sshd double
// on its address:22, a Talos API double per node on its address:50000,
// the cluster's API server on the VIP once cp-1 has its config, and the
// project driven through the milner binary.
type prod struct {
	t     *testing.T
	pve   *pveapi.Server
	ssh   map[string]*pveapi.SSHHost
	talos *talosapi.Cluster
	api   chan *clusterapi.API
	dir   string
	env   []string
	bin   string
	token pveapi.Token
	// hostKeys are each host's sshd key, by host.
	hostKeys map[string]ssh.Signer
	home     string
	sock     string
	// mu guards vmOf and byVM: each node's VM id, and the Talos node of
	// each node VM, which the doubles' callbacks read while a node is added.
	mu   *sync.Mutex
	vmOf map[string]int
	byVM map[int]*talosapi.Node
	// done ends the test's background goroutines.
	done chan struct{}
}

// result is one run of the milner binary.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) out() string { return r.stdout + r.stderr }

// newProd builds the world and the project: the committed Pulumi.prod.yaml
// with milner:stopAfter talos (no apps) and the image's digest, the token
// as a secret, known_hosts holding each host's key, and an SSH agent
// holding the key the hosts authorize (ssh.agent: true, as committed).
func newProd(t *testing.T) *prod {
	t.Helper()
	p := &prod{t: t, pve: pveapi.New(hosts...), ssh: map[string]*pveapi.SSHHost{}, api: make(chan *clusterapi.API, 1), hostKeys: map[string]ssh.Signer{}}
	p.pve.UnauthorizedDelay = 0
	id, secret, _ := strings.Cut(token, "=")
	p.token = pveapi.Token{ID: id, Secret: secret, ACL: map[string][]string{
		"/":                       {"Sys.Audit", "Sys.Modify"},
		"/vms":                    {"VM.Allocate", "VM.Audit", "VM.Config.CDROM", "VM.Config.CPU", "VM.Config.Cloudinit", "VM.Config.Disk", "VM.Config.HWType", "VM.Config.Memory", "VM.Config.Network", "VM.Config.Options", "VM.PowerMgmt"},
		"/storage":                {"Datastore.AllocateSpace", "Datastore.AllocateTemplate", "Datastore.Audit"},
		"/sdn/zones/localnetwork": {"SDN.Use"},
	}}
	p.pve.AddToken(p.token)
	for _, v := range []string{talosFrom, talosTo} {
		p.pve.AddImage(imageURL(v), pveapi.Image{Data: []byte("talos " + v + " nocloud"), VirtualSize: pveapi.GiB})
	}
	serve(t, p.pve)

	home := t.TempDir()
	noErr(t, os.MkdirAll(filepath.Join(home, ".ssh"), 0o700))
	_, userKey, err := ed25519.GenerateKey(rand.Reader)
	noErr(t, err)
	signer, err := ssh.NewSignerFromKey(userKey)
	noErr(t, err)
	var known []string
	for _, h := range hosts {
		hk := newHostKey(t)
		p.hostKeys[h.Name] = hk
		l, err := net.Listen("tcp", h.Address+":22")
		noErr(t, err)
		sh := p.pve.ServeSSH(l, h.Name, hk, "root", signer.PublicKey())
		t.Cleanup(func() { _ = sh.Close() })
		p.ssh[h.Name] = sh
		known = append(known, h.Address+" "+strings.TrimSpace(string(ssh.MarshalAuthorizedKey(hk.PublicKey()))))
	}
	noErr(t, os.WriteFile(filepath.Join(home, ".ssh", "known_hosts"), []byte(strings.Join(known, "\n")+"\n"), 0o600))
	sock := filepath.Join(t.TempDir(), "agent.sock")
	keyring := agent.NewKeyring()
	noErr(t, keyring.Add(agent.AddedKey{PrivateKey: userKey}))
	al, err := net.Listen("unix", sock)
	noErr(t, err)
	t.Cleanup(func() { _ = al.Close() })
	go func() {
		for {
			c, err := al.Accept()
			if err != nil {
				return
			}
			go func() { _ = agent.ServeAgent(keyring, c); _ = c.Close() }()
		}
	}()

	p.newTalos()

	p.home, p.sock = home, sock
	p.initProject()
	p.bin = harness.Milner(t, repo)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("PVE journal:\n%s", strings.Join(p.journalSince(0), "\n"))
		}
	})
	return p
}

// initProject writes a project: the repo's Pulumi.yaml, the committed
// Pulumi.prod.yaml with milner:stopAfter talos and the image's digest, the
// token set as a secret with the pinned CLI, a file backend of its own.
// vmDeletedAlone requires the PVE journal since mark to hold one DELETE,
// of VM vm on host, and no write to its disk holder; it returns when the
// delete came.
func (p *prod) vmDeletedAlone(t *testing.T, mark int, host string, vm, holder int) (del time.Time) {
	t.Helper()
	for _, e := range p.pve.Journal()[mark:] {
		if e.Method == "DELETE" {
			if strings.TrimSuffix(e.Path, "/") != fmt.Sprintf("/nodes/%s/qemu/%d", host, vm) {
				t.Errorf("a delete of another object: %s", e)
			}
			del = e.Time
		}
		if strings.Contains(e.Path, fmt.Sprintf("/qemu/%d", holder)) && e.Method != "GET" {
			t.Errorf("the holder was written: %s", e)
		}
	}
	return del
}

func (p *prod) initProject() {
	p.dir = p.t.TempDir()
	for _, f := range []string{"Pulumi.yaml", "Pulumi.prod.yaml"} {
		b, err := os.ReadFile(filepath.Join(repo, f))
		noErr(p.t, err)
		noErr(p.t, os.WriteFile(filepath.Join(p.dir, f), pinVersions(b), 0o600))
	}
	noErr(p.t, os.Symlink(filepath.Join(repo, ".tools"), filepath.Join(p.dir, ".tools")))
	sum := sha256.Sum256([]byte("talos v1.9.5 nocloud"))
	p.editConfig(func(cfg map[string]any) {
		cfg["milner:stopAfter"] = "talos"
		px := cfg["milner:substrate"].(map[string]any)["proxmox"].(map[string]any)
		px["imageSha256"] = hex.EncodeToString(sum[:])
	})
	state := filepath.Join(p.dir, "state")
	noErr(p.t, os.MkdirAll(state, 0o700))
	p.env = append(os.Environ(), "HOME="+p.home, "SSH_AUTH_SOCK="+p.sock,
		"PULUMI_BACKEND_URL=file://"+state, "PULUMI_CONFIG_PASSPHRASE="+passphrase, "PULUMI_SKIP_UPDATE_CHECK=true")
	p.pulumi("stack", "init", stackName)
	p.pulumi("config", "set", "--secret", "--stack", stackName, "milner:"+config.ProxmoxTokenKey, "--", token)
}

// project is another project on the same world, with empty state (a
// stack whose state was lost).
func (p *prod) project() *prod {
	c := *p
	c.initProject()
	return &c
}

// engine opens the project's stack on the engine directly (no milner
// pre-flight), with the project's HOME and SSH agent in this process's
// environment, which the plugins inherit.
func (p *prod) engine() *engine.Stack {
	p.t.Helper()
	p.t.Setenv("HOME", p.home)
	p.t.Setenv("SSH_AUTH_SOCK", p.sock)
	st, err := engine.Open(context.Background(), engine.Options{
		Stack: stackName, Dir: p.dir, Tools: filepath.Join(repo, ".tools", "bin"), Backend: "file://" + filepath.Join(p.dir, "state"),
		Passphrase: passphrase, Program: stacks.Program, Progress: logWriter{p.t},
	})
	noErr(p.t, err)
	return st
}

// newTalos starts a Talos API double per node, powered off, on the nocloud
// platform, linked to the PVE double: a node VM that starts boots its
// node, with the user-data its nocloud drive carries (PVE builds the drive
// from the cicustom snippet at every start, qemu-server Cloudinit.pm
// apply_cloudinit_config; Talos' nocloud platform takes the user-data as
// its machine config when the STATE partition holds none: talos v1.9.5
// internal/app/machined/pkg/runtime/v1alpha1/platform/nocloud/nocloud.go,
// Nocloud.Configuration, and controllers/config/acquire.go); a VM that
// stops powers its node off; a node that shuts down through the Talos API
// powers its VM off, which PVE then reports stopped.
func (p *prod) newTalos() {
	t := p.t
	p.mu, p.vmOf, p.byVM = &sync.Mutex{}, map[string]int{}, map[int]*talosapi.Node{}
	// A control plane joining the running cluster is an etcd learner for
	// a tenth of Talos' ~15 s before its promotion, as the kubelet's
	// timing is a tenth of the real one (clusterapi.CIKubelet).
	p.talos = talosapi.NewCluster(talosapi.WithLearnerPromotion(learnerPromotion), talosapi.OnShutdown(func(n *talosapi.Node) {
		p.mu.Lock()
		id := p.vmOf[n.Name()]
		p.mu.Unlock()
		p.pve.GuestPoweredOff(id)
	}))
	t.Cleanup(func() { _ = p.talos.Close() })
	for _, n := range prodNodes {
		p.addTalosNode(n)
	}
	p.pve.OnPower = func(v pveapi.VM) {
		p.mu.Lock()
		n := p.byVM[v.VMID]
		p.mu.Unlock()
		if n == nil {
			return // a holder: never started, no guest
		}
		var err error
		if v.Status == "running" {
			if ud := p.pve.UserData(v.VMID); ud != nil {
				err = n.SetPlatformConfig(ud)
			}
			if err == nil {
				err = n.PowerOn()
			}
		} else {
			err = n.PowerOff()
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "VM %d power %s: %v\n", v.VMID, v.Status, err)
		}
	}
	apiDir := t.TempDir()
	p.done = make(chan struct{})
	t.Cleanup(func() {
		close(p.done)
		select {
		case a := <-p.api:
			if a != nil {
				if t.Failed() {
					t.Logf("kube-apiserver log:\n%s", a.Logs("kube-apiserver"))
				}
				a.Stop()
			}
		default:
		}
	})
	go func() {
		cp := p.talos.Node("cp-1")
		for cp.Config() == nil {
			select {
			case <-p.done:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
		a, err := clusterapi.Start(filepath.Join(repo, ".tools", "bin"), apiDir, netip.MustParseAddr(prodVIP), cp.Config())
		if err == nil {
			var seed []clusterapi.Node
			for _, n := range prodNodes {
				seed = append(seed, clusterapi.Node{Name: n.name, IP: netip.MustParseAddr(n.addr), ControlPlane: true})
			}
			err = a.Seed(seed)
		}
		if err == nil {
			// The VIP answers through the control plane elected to hold it.
			err = a.RelayVIP(p.talos)
		}
		if err == nil {
			// Each control plane's own API server (address:6443), which
			// milner waits for after a control plane's config apply
			// (internal/apiready), is the same one here: a TCP forward to
			// the VIP's (its certificate names the VIP, the server name
			// the wait asks for).
			for _, n := range prodNodes {
				if err = forward(t, n.addr+":6443", prodVIP+":6443"); err != nil {
					break
				}
			}
		}
		if err == nil {
			// Each node's kubelet: the mirror pods of the static pods
			// Talos writes, at their config version, on the node's
			// address, what the wait between control planes looks for.
			go a.Kubelet(p.talos, p.done, clusterapi.CIKubelet)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "cluster API: %v\n", err)
		}
		p.api <- a
	}()
}

// addTalosNode adds n's Talos API double, powered off, on the nocloud
// platform at the image's version, linked to n's VM id (newTalos).
func (p *prod) addTalosNode(n prodNode, opts ...talosapi.NodeOption) *talosapi.Node {
	disks := talosapi.WithDisks(talosapi.Disk{DevPath: "/dev/vda", Size: 64 << 30}, talosapi.Disk{DevPath: "/dev/vdb", Size: 128 << 30})
	opts = append([]talosapi.NodeOption{disks, talosapi.WithPlatform(talosapi.Nocloud), talosapi.WithPoweredOff(), talosapi.WithVersion(talosFrom), talosapi.WithMAC(n.mac())}, opts...)
	node, err := p.talos.AddNode(n.name, netip.MustParseAddrPort(n.addr+":50000"), opts...)
	noErr(p.t, err)
	p.mu.Lock()
	p.vmOf[n.name], p.byVM[n.vmid] = n.vmid, node
	p.mu.Unlock()
	return node
}

// grow adds node n to the world of a running cluster and to the stack
// config (a node of Pulumi.prod.yaml's shape, 64 + 128 GiB disks): its
// Talos double at the image's version, and, once it has booted with its
// config, what its kubelet writes to the cluster's API server (its Node,
// a control plane's mirror pods; clusterapi Join) and, for a control
// plane, its own API server's address (forward, as newTalos does).
func (p *prod) grow(n prodNode) {
	p.t.Helper()
	d := p.addTalosNode(n, talosapi.WithVersion(talosTo))
	api := p.clusterAPI()
	if n.controlPlane {
		noErr(p.t, forward(p.t, n.addr+":6443", prodVIP+":6443"))
	}
	go func() {
		for d.Config() == nil || !d.Status().Booted {
			select {
			case <-p.done:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
		if err := api.Join(clusterapi.Node{Name: n.name, IP: netip.MustParseAddr(n.addr), ControlPlane: n.controlPlane}); err != nil {
			fmt.Fprintf(os.Stderr, "%s's kubelet: %v\n", n.name, err)
		}
	}()
	role := "worker"
	if n.controlPlane {
		role = "controlplane"
	}
	p.editConfig(func(cfg map[string]any) {
		cfg["milner:nodes"] = append(cfg["milner:nodes"].([]any), map[string]any{
			"name": n.name, "role": role, "vcpu": 4, "memoryMiB": 8192, "osDiskGiB": 64, "dataDiskGiB": 128,
			"address": n.addr, "mac": n.mac(), "vmId": n.vmid, "proxmoxNode": n.host,
		})
	})
}

// forward relays every connection to from to, until the test ends.
func forward(t *testing.T, from, to string) error {
	l, err := net.Listen("tcp", from)
	if err != nil {
		return err
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				u, err := net.Dial("tcp", to)
				if err != nil {
					return
				}
				defer func() { _ = u.Close() }()
				go func() { _, _ = io.Copy(u, c) }()
				_, _ = io.Copy(c, u)
			}()
		}
	}()
	return nil
}

// newHostKey is a fresh ed25519 host key.
func newHostKey(t *testing.T) ssh.Signer {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	noErr(t, err)
	s, err := ssh.NewSignerFromKey(k)
	noErr(t, err)
	return s
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// pulumi runs the pinned CLI in the project.
func (p *prod) pulumi(args ...string) string {
	p.t.Helper()
	cmd := exec.Command(filepath.Join(repo, ".tools", "bin", "pulumi"), append([]string{"--non-interactive"}, args...)...)
	cmd.Dir, cmd.Env = p.dir, p.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		p.t.Fatalf("pulumi %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// milner runs the binary with --stack prod -C <project> after the verb and
// logs what it printed.
func (p *prod) milner(args ...string) result {
	p.t.Helper()
	full := append([]string{args[0], "--stack", stackName, "-C", p.dir}, args[1:]...)
	cmd := exec.Command(p.bin, full...)
	cmd.Env = p.env
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	default:
		p.t.Fatalf("milner %s: %v", strings.Join(args, " "), err)
	}
	p.t.Logf("milner %s: exit %d in %s\n--- stdout\n%s--- stderr\n%s", strings.Join(args, " "), r.code,
		time.Since(start).Round(time.Millisecond), r.stdout, r.stderr)
	return r
}

// must runs milner and fails the test unless it exits 0.
func (p *prod) must(args ...string) result {
	p.t.Helper()
	r := p.milner(args...)
	if r.code != 0 {
		p.t.Fatalf("milner %s: exit %d, want 0", strings.Join(args, " "), r.code)
	}
	return r
}

// refused requires a non-zero exit whose output says each of want.
func (p *prod) refused(what string, r result, want ...string) {
	p.t.Helper()
	if r.code == 0 {
		p.t.Fatalf("%s: exit 0, want a refusal", what)
	}
	for _, w := range want {
		if !strings.Contains(r.out(), w) {
			p.t.Errorf("%s: output lacks %q", what, w)
		}
	}
}

// editConfig edits the stack file's config in place (keeping the
// encryption salt and the secrets the CLI wrote).
func (p *prod) editConfig(edit func(cfg map[string]any)) {
	p.t.Helper()
	file := filepath.Join(p.dir, "Pulumi."+stackName+".yaml")
	b, err := os.ReadFile(file)
	noErr(p.t, err)
	doc := map[string]any{}
	noErr(p.t, yaml.Unmarshal(b, &doc))
	edit(doc["config"].(map[string]any))
	b, err = yaml.Marshal(doc)
	noErr(p.t, err)
	noErr(p.t, os.WriteFile(file, b, 0o600))
}

// node edits node i of milner:nodes.
func (p *prod) node(i int, edit func(n map[string]any)) {
	p.editConfig(func(cfg map[string]any) { edit(cfg["milner:nodes"].([]any)[i].(map[string]any)) })
}

// journalSince renders the PVE double's journal from mark on.
func (p *prod) journalSince(mark int) []string {
	var out []string
	for _, e := range p.pve.Journal()[mark:] {
		out = append(out, e.Time.Format("15:04:05.000")+" "+e.String())
	}
	return out
}

// writes are the requests from mark on that change something: every API
// request but a GET, and every SSH operation but a read.
func (p *prod) writes(mark int) []string {
	var out []string
	for _, e := range p.pve.Journal()[mark:] {
		if e.Method == "GET" || e.Method == "SSH" && (e.Query == "connect" || strings.HasPrefix(e.Form, "sudo check") || strings.HasPrefix(e.Form, "stat ") || strings.HasPrefix(e.Form, "open ")) {
			continue
		}
		out = append(out, e.String())
	}
	return out
}

// merged is both doubles' journals from the marks on, in time order: the
// PVE API and SSH requests and the Talos calls and events.
func (p *prod) merged(pveMark, talosMark int) []string {
	type line struct {
		at   time.Time
		text string
	}
	var ls []line
	for _, e := range p.pve.Journal()[pveMark:] {
		ls = append(ls, line{e.Time, "pve   " + e.String()})
	}
	for _, e := range p.talos.Journal()[talosMark:] {
		what := e.Name()
		if e.Detail != "" {
			what += " (" + e.Detail + ")"
		}
		if e.Err != nil {
			what += " -> " + e.Err.Error()
		}
		ls = append(ls, line{e.Time, "talos " + e.Node + " " + what})
	}
	sort.SliceStable(ls, func(i, j int) bool { return ls[i].at.Before(ls[j].at) })
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.at.Format("15:04:05.000") + " " + l.text
	}
	return out
}

// clusterAPI is the cluster's API server, once started.
func (p *prod) clusterAPI() *clusterapi.API {
	p.t.Helper()
	select {
	case a := <-p.api:
		p.api <- a
		if a == nil {
			p.t.Fatal("the cluster API did not start (see the log)")
		}
		return a
	case <-time.After(time.Minute):
		p.t.Fatal("the cluster API did not start within a minute of the up")
		return nil
	}
}

// volume is the volume id of a drive value ("local-lvm:vm-1150-disk-0,...").
func volume(drive string) string { v, _, _ := strings.Cut(drive, ","); return v }

// TestProdOnRealPlugin: the committed prod stack (three control planes on
// three PVE hosts, stopped after the Talos layer) driven by `milner` as a
// user runs it, on the real engine with the real Proxmox and Talos
// plugins, against the PVE double (API and each host's sshd) and a Talos
// API double per node, linked as the VMs boot and stop. Steps, in order,
// on one stack; each logs its timing.
//
//   - The whole prod stack through `milner` (`tests/pveengine`
//     TestProdOnRealPlugin, in `make integration`; alone: `go test -tags
//     integration -count=1 -run TestProdOnRealPlugin -v ./tests/pveengine/`,
//     root): the committed `Pulumi.prod.yaml` with `milner:stopAfter: talos` and
//     `imageSha256` set, the `milner` binary as a user runs it, the real bpg and
//     Talos plugins. In the namespace: the PVE double on pve-1:8006, each host's
//     sshd double on its address:22 (`tests/pveapi` ssh.go: what bpg's
//     `proxmox/ssh/client.go` runs, its sudo check, `tee` with the file on
//     stdin, SFTP stat and chmod), the hosts' keys in a `known_hosts` under the
//     run's `HOME` and the user key in an SSH agent (`ssh.agent: true`, as
//     committed); a Talos API double per node on its address:50000, powered off
//     until its VM starts: a node VM's start boots its node with the snippet its
//     `cicustom` names as the nocloud user-data (PVE rebuilds the drive from it
//     at start; Talos takes it as the config while the STATE partition holds
//     none), a VM's stop powers the node off, Talos' `Shutdown` powers the VM
//     off; a real kube-apiserver on the VIP, each control plane's own
//     address:6443 forwarded to it. Steps, in order, on one stack (times on two
//     cores, 2026-12-05; the whole test 168 s, 2 min 25 s of it in the
//     namespace):
//     1. privileges (0.4 s): a token without `Datastore.Allocate` on
//     `/storage/local` is refused before anything, naming it;
//     2. from empty to health (38 s): one `download-url` per host with
//     `checksum`/`checksum-algorithm=sha256`; holders stopped and protected,
//     node VMs running on their hosts attaching the holders' volumes; per
//     host the snippet `local:snippets/milner-prod-<node>-talos.yaml`
//     uploaded over SSH (sudo check, `tee` of 11881 bytes, SFTP stat twice,
//     `chmod 0600`) and mode `0600` on the double's side; each Talos node
//     booted with exactly the snippet's bytes as its config, no config sent
//     unauthenticated, one Bootstrap, the health check read the cluster;
//     3. no-op (3 s): `milner preview` plans nothing, `milner up` makes no
//     write request (API or SSH) and sends no ApplyConfiguration;
//     4. cp-2's memory changed (2 s): bpg plans `replace [diff: ~memory]` of
//     the node VM (ReplaceOnChanges); `milner up` is refused naming `milner
//     up --stack prod --replace cp-2`, with no write;
//     5. `milner up --replace cp-2` (12 s): the journal, in order: the
//     pre-flight reads (permissions, each host's network, an SSH handshake to
//     each host for its key), the live VMs, Talos `Shutdown` to cp-2 alone,
//     its VM reported `stopped` (two polls), then bpg: `GET
//     .../151/status/current` (stopped: no stop, no shutdown), `DELETE
//     /nodes/pve-2/qemu/151/?destroy-unreferenced-disks=1&purge=1` (the
//     task: the cloud-init drive freed, the holder's volumes left), the
//     create of 151 with `memory=20480`, `virtio0=local-lvm:vm-1151-disk-0`,
//     `virtio1=local-lvm:vm-1151-disk-1`, the same `cicustom`, then its
//     start; cp-2 booted configured from its kept disk. VMs 150, 152, 1150,
//     1151, 1152 unchanged, no write to the holder, the two volumes' bytes
//     and sizes the same; no ApplyConfiguration; a preview after plans
//     nothing;
//     6. a changed host key (5 s): pve-3's sshd shows another key; `milner up`
//     is refused by the pre-flight naming the new key's fingerprint, with no
//     write; bpg itself, through the engine with the snippet removed on the
//     host and refreshed away, fails its upload: `REMOTE HOST IDENTIFICATION
//     HAS CHANGED for host 192.168.1.13:22`; with the key back, `milner up`
//     uploads it again, `0600`;
//     7. a Talos bump to v1.9.6 (24 s): `milner preview` is refused by the
//     versions interlock and plans a create of `milner-prod-<host>-image-v1.9.6`
//     per host, the applies' updates and no VM; `milner upgrade` upgrades the
//     three nodes through Talos (18 s) and skips its record step (the images
//     are other changes pending); the `milner up` after it downloads the three
//     images (with the new checksum) and records the configs: no other write,
//     no VM touched; a preview after plans nothing;
//     8. a disk grow (cp-3's data disk 128 -> 160 GiB, 12 s): bpg plans an update
//     of the holder and a replace of the node VM (its attached size follows
//     the holder's), so `milner up` is refused naming `--replace cp-3`; with
//     it: the holder's config written again, `PUT /nodes/pve-3/qemu/1152/resize
//     disk=scsi1&size=171798691840`, then the node VM's delete and create
//     attaching the same `vm-1152-disk-1`, now 160 GiB;
//     9. refused before any write (8 s), each with `up` and `up --replace
//     cp-1`, cp-1 still running after: cp-1 moved to pve-2 (config validation
//     refuses two control planes on one host first; with the override, the
//     holder's Protect fails the engine's preview: `unable to replace
//     resource ... milner-prod-cp-1-disks`), a new image URL at the same
//     version (the gate: each host's image is persistent substrate and would
//     be replaced), a data disk shrink 128 -> 100 GiB (the new
//     `proxmox-disk-shrink` refusal; with `--replace cp-1` it is the only one);
//     10. guards (13 s): a fresh project (state lost) with the operator's
//     stack file as it stands (cp-2's memory, cp-3's data disk, Talos
//     v1.9.6) and `milner:stopAfter: substrate` is refused by
//     `substrate-in-state` listing the six VMs and naming `milner adopt`;
//     cp-3's VM recreated out of band as VM 162 (same name) is refused by
//     `state-identity` (`the cluster's "milner-prod-cp-3" is VM 162 on
//     pve-3`); then adoption by import: `milner adopt --node cp-N
//     --holder --id 115N` and `milner adopt --node cp-N --id 15N` for the
//     three nodes, each exiting 0 (1.2-2.4 s) with its preview planning the
//     adopted VMs' `import` and no diff; the `milner preview` after all six
//     plans the six VMs' `import` with no diff, and no create, update,
//     replace or delete of any VM; besides, the creates of the three hosts'
//     v1.9.6 images (no adoption records them). No write request from the
//     first adopt to that preview. The `milner up --yes` after it, with the
//     image unpinned as the committed `Pulumi.prod.yaml` is (no
//     `imageSha256`), exits 0 (3.6 s): it imports the six VMs with no
//     write to any of them, and on each host bpg's `download-url` is
//     refused (`refusing to override existing file`), bpg stops that task,
//     deletes the file (`DELETE .../storage/local/content/import/<file>`)
//     and downloads it again; a
//     `milner preview` after it plans no changes. Before the fix, cp-1's
//     node VM adoption was refused (`adopt-replaces-nothing`, bpg planning a
//     replace), and the up after the adoption failed on the images:
//     "caught" below;
//     11. teardown (5 s): `milner teardown` without confirmation lists every
//     resource, the holders and the secrets bundle `(protected)`, the three
//     images and three snippets `(retained: left where it is, not
//     deleted)`, "6 retained resources are removed from the state only",
//     and is refused (`refused: not confirmed`, exit 3 in that run, before milner took Pulumi's exit codes) with no write; `milner teardown
//     --yes` (5 s) deletes 24 resources; its writes, in order: each holder's
//     `PUT .../config protection=0` (milner's unprotect), each node VM's
//     `POST .../status/stop` then `DELETE
//     /nodes/<host>/qemu/<vmid>/?destroy-unreferenced-disks=1&purge=1`,
//     then each holder's (the double, as qemu-server's `destroy_vm`,
//     refuses a protected VM); the
//     images and snippets leave the state only (`[retain]`); after it no VM is
//     left and no volume on any host's `local-lvm`; each host's `local`
//     keeps exactly the retained files: the v1.9.5 and v1.9.6 images and
//     that host's node's snippet.
//     What the real provider and the doubles caught, fixed:
//   - bpg's snippet upload first reads the datastore's configuration (`GET
//     /storage/local`, for its path), which PVE allows with
//     `Datastore.Allocate` only (pve-storage `Config.pm` `read`): the
//     privilege preflight did not ask for it (it asked nothing of the
//     snippets datastore), so a token granted its list would have failed
//     mid-apply, after the images and holders. It now asks
//     `Datastore.Allocate` and `Datastore.Audit` on the snippets datastore
//     when the stack has the Talos layer (`internal/pve` `Needs`).
//   - bpg refuses a changed host key only at the upload, mid-apply; milner's
//     pre-flight now asks each known host for its key of the known type and
//     refuses another before anything is touched (`internal/guard`
//     `KnownHosts`, `DialHostKey`).
//   - a disk shrink: bpg refuses it only in the holder's update
//     (`vmUpdateDiskLocationAndSize`, "Cannot shrink"), and with `--replace`
//     after Talos' Shutdown had stopped the node: now a `proxmox-disk-shrink`
//     refusal with the delta.
//   - with three control planes, milner waits after each control plane's
//     apply for that node's own API server (`internal/apiready`): the test
//     forwards each address's 6443 to the VIP's API server.
//   - `milner upgrade`'s record step updates configs only: on Proxmox a bump
//     also creates each host's new image, so the record is skipped and the
//     `milner up` after it records the configs with the images.
//   - adoption by import planned a replace of every node VM (and an update
//     of its holder), which `milner adopt` refused: the holder's import
//     diffed on `agent`, `cpu`, `memory`, `operatingSystem`, `watchdog`,
//     `hookScriptFileId` and `disks`, the node VM's on `agent`, `disks`,
//     `hookScriptFileId`, `watchdog` (ReplaceOnChanges). Causes, attribute by
//     attribute: (a) the double stored bpg's CD-ROM drive as sent,
//     `file=cdrom,media=cdrom,`, where qemu-server writes `print_drive`'s
//     `cdrom,media=cdrom` (`API2/Qemu.pm` `$create_disks`): bpg read the
//     trailing comma as an empty volume. Fixed in the double (and a drive's
//     empty fields dropped, as `parse_property_string` does); with PVE's
//     answer the import reads `cdrom` as the CD-ROM's file too, one more
//     diff. (b) bpg v0.95.0's import: `disk/disk.go` `Read` skips only
//     `none` drives and the VM's own cloud-init volume, and with no disks in
//     the prior state keeps every drive it found, so both VMs' imported
//     disks began with bpg's own CD-ROM drive `ide3` and the node VM's
//     `virtio0` paired with the holder's `ide3` (`pathInDatastore` empty,
//     `virtio1` with the holder's OS disk); `vm.go` `vmReadCustom` sets the
//     agent, cpu, memory and operating_system blocks only where PVE's values
//     differ from bpg's defaults, the watchdog to an empty list when there
//     is none, and `vmReadPrimitiveValues` never reads
//     `hook_script_file_id`, while the bridge fills each block's default
//     into the inputs. (c) the program: the node VM declares the agent off
//     (bpg's default) and both VMs took bpg's default CD-ROM (the host's
//     drive). Fixed: both VMs declare the CD-ROM drive empty (`none`, bpg's
//     documented value; ignored after creation, so VMs made before keep
//     theirs and are not replaced; the guard's fix then prints `qm set
//     <vmid> --ide3 none,media=cdrom` before their adoption), and an adopted
//     VM ignores exactly what the import cannot read back
//     (`components/substrate` `ProxmoxNodeImportUnread`,
//     `ProxmoxHolderImportUnread`, [adopt.md](runbooks/adopt.md)); applying
//     the update instead would stop and start a running node VM (bpg's
//     `vmUpdate` marks an agent change `rebootRequired`). Reverted once
//     (`components/substrate/proxmox.go` as before, the double fixed): the
//     holder's adoption preview plans `import ... : agent, cdrom, cpu, disks,
//     hookScriptFileId, memory, operatingSystem, watchdog`, and `milner adopt
//     --node cp-1 --id 150` exits 5, `adopting node "cp-1" (150) would plan
//     [delete-replaced ... replace ... create-replacement ...]` `[rule
//     adopt-replaces-nothing]` (bpg's `[diff:
//     +agent,hookScriptFileId,watchdog~cdrom,disks]`, the imported disks
//     starting with `ide3` `pathInDatastore: cdrom`). With only the empty
//     CD-ROM drive reverted: the holder's import plans `disks,
//     hookScriptFileId` and cp-1's VM adoption is refused the same way
//     (`[diff: +hookScriptFileId~disks]`). With only the adopted VMs' ignores
//     reverted: the holder's import plans `agent, cpu, hookScriptFileId,
//     memory, operatingSystem, watchdog` and cp-1's VM adoption is refused
//     (`[diff: +agent,hookScriptFileId,watchdog]`, no `disks`).
//   - bpg stops a failed download's task (`DELETE
//     /nodes/{node}/tasks/{upid}`, pve-manager `Tasks.pm` `stop_task`), which
//     the double did not serve (501); it does now.
//   - the images after a lost state (or a teardown, which retains them):
//     bpg v0.95.0's `download_file` has no importer (no `ImportState` in
//     `fwprovider/nodes/resource_download_file.go`), so the `up` after an
//     adoption creates each host's image resource over the file already
//     there. PVE's `download_url` worker (pve-common
//     `PVE::Tools::download_file_from_url`; the API never sets
//     `allow_overwrite`) keeps an existing file whose checksum matches the
//     one asked, refuses a mismatch, and without a checksum refuses with
//     `refusing to override existing file`, which bpg reads as "File already
//     exists in the datastore, it was created outside of Terraform" and
//     fails the up, no VM imported. The double had refused every existing
//     file, checksum or not (so a pinned stack, which PVE lets through,
//     failed too), and answered the delete of a volume id with a slash 501
//     (PVE routes `.../content/<volume>` with `fragmentDelimiter ”`,
//     pve-storage `Status.pm`): both fixed, `tests/pveapi`
//     TestDownloadOverAnExistingFile. The committed prod stack is unpinned,
//     so the program sets `overwrite_unmanaged` on each image (ignored
//     after creation): bpg then deletes the file (`DELETE
//     .../storage/<ds>/content/import%2F<file>`, `Datastore.Allocate` on the
//     image datastore) and downloads it again (`Create`, around line 430).
//     The file is this cluster's own image at that version and URL (its
//     name carries cluster, version and a hash of the URL); no VM uses it (a
//     holder's disks are `import-from` copies). Reverted once (no
//     `overwrite_unmanaged`, the double fixed): the up after the adoption
//     exits 1, `File already exists in the datastore, it was created outside
//     of Terraform or is managed by another resource`.
//
// Not checked without a real Proxmox cluster:
// The tests run the program under mocks, the PVE client against the PVE API
// double (written from PVE's source, not captured from a host), and the whole
// prod stack through `milner` with the real bpg and Talos plugins against the
// PVE double (API and the hosts' sshd) and Talos API doubles (above).
// Nothing here was run against a real PVE host or cluster, nor with a
// booting Talos node. What ran only against the doubles, so still unverified
// on PVE: the holder's disks attached by `pathInDatastore` without a perpetual
// diff, bpg's delete of a node VM leaving the holder's disks (qemu-server's
// `destroy_vm` frees only volumes the VM owns: read in source, modelled, and
// bpg's `DELETE ...?destroy-unreferenced-disks=1&purge=1` ran against it), the
// snippet upload over SSH and the file's mode on the host, the teardown's
// unprotect; PVE's own answers
// where the double assumes them (the list above). Not run at all: that the
// factory's `nocloud-amd64.qcow2` imports through the `import` content type;
// that Talos' nocloud platform takes the cloud-init address and boots the
// image with the snippet as its config (the Talos double takes the bytes as
// Talos' source says it does). Not run either: a reinstall after `milner teardown` (the
// images it retains are downloaded over the same way as after an adoption,
// not run here); adopting VMs made before the empty CD-ROM
// drive (the guard's `qm set ... --ide3 none,media=cdrom` on a running VM);
// the exact privilege list on a real PVE (and
// the `/access/permissions` reading of it); the reassignment commands of
// [adopt.md](runbooks/adopt.md); the move procedure; that adding the `ssh`
// block to an existing stack's provider is an in-place provider update
// (pulumi-terraform-bridge's `DiffConfig` replaces a provider only for
// settings marked `ForcesProviderReplace`, pulumi-terraform-bridge PR #1683;
// `milner up`'s gate would refuse the cascade otherwise); two running VMs
// sharing a disk (nothing in PVE refuses it; Milner's rule is that it never
// happens).
//
// The steps numbered above were written before three more were added
// between the guards and the teardown: a worker added, a fourth control
// plane added (the up waits for its etcd promotion), and a control plane
// removed: `up --remove cp-3` (cp-3 out of the config, Vault's replicas
// lowered with it): its etcd member removed through cp-1, Talos Shutdown,
// then the only DELETE, of its node VM 152; its disk holder 1152 unwritten,
// kept and listed with its `pvesh` commands; the other members kept; a
// no-op after; 17 s.
func TestProdOnRealPlugin(t *testing.T) {
	for _, b := range []string{"pulumi", "pulumi-resource-proxmoxve", "pulumi-resource-talos", "etcd", "kube-apiserver", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(repo, ".tools", "bin", b)); err != nil {
			t.Skipf("%v (scripts/tools.sh pulumi proxmoxve talos kubeapi)", err)
		}
	}
	extra := []string{prodVIP}
	for _, n := range append(slices.Clone(prodNodes), addedWorker, addedControlPlane) {
		extra = append(extra, n.addr)
	}
	if os.Getenv(nsEnv) == "" {
		harness.Milner(t, repo) // built outside: the module cache and build cache are warm
	}
	if !inNamespace(t, extra...) {
		return
	}
	p := newProd(t)

	step := func(name string, f func(t *testing.T, mark, talosMark int)) {
		if t.Failed() {
			return
		}
		mark, talosMark := len(p.pve.Journal()), len(p.talos.Journal())
		start := time.Now()
		ok := t.Run(name, func(t *testing.T) { p.t = t; f(t, mark, talosMark) })
		p.t = t
		t.Logf("%s: %s in %s", name, map[bool]string{true: "PASS", false: "FAIL"}[ok], time.Since(start).Round(time.Second))
	}

	step("privileges: the snippet upload needs Datastore.Allocate", func(t *testing.T, mark, _ int) {
		// bpg reads the snippets datastore's config (GET /storage/local)
		// for its path: PVE allows that with Datastore.Allocate only.
		r := p.milner("up", "--yes")
		p.refused("up with a token without Datastore.Allocate on /storage/local", r, "Datastore.Allocate on /storage/local", "nothing was changed")
		if w := p.writes(mark); len(w) > 0 {
			t.Errorf("the refused up wrote:\n%s", strings.Join(w, "\n"))
		}
		p.token.ACL["/storage/local"] = append(slices.Clone(p.token.ACL["/storage"]), "Datastore.Allocate")
		p.pve.AddToken(p.token)
	})

	step("from empty", func(t *testing.T, mark, talosMark int) {
		p.must("up", "--yes")
		downloads := map[string]int{}
		for _, e := range p.pve.Journal()[mark:] {
			if e.Method == "POST" && strings.HasSuffix(e.Path, "/storage/local/download-url") {
				downloads[strings.Split(e.Path, "/")[2]]++
				if !strings.Contains(e.Form, "checksum-algorithm=sha256") || !strings.Contains(e.Form, "checksum=") {
					t.Errorf("a download without its checksum: %s", e)
				}
			}
		}
		if fmt.Sprint(downloads) != "map[pve-1:1 pve-2:1 pve-3:1]" {
			t.Errorf("downloads per host: %v, want one each", downloads)
		}
		vms := p.pve.VMs()
		for _, n := range prodNodes {
			node, holder := vms[n.vmid], vms[n.vmid+1000]
			if node.Node != n.host || node.Status != "running" || holder.Node != n.host || holder.Status != "stopped" || holder.Config["protection"] != "1" {
				t.Errorf("%s: node VM %d on %s %s, holder on %s %s protection %q", n.name, n.vmid, node.Node, node.Status, holder.Node, holder.Status, holder.Config["protection"])
			}
			for d, slot := range []string{"scsi0", "scsi1"} {
				if hv, nv := volume(holder.Config[slot]), volume(node.Config[fmt.Sprintf("virtio%d", d)]); hv == "" || hv != nv {
					t.Errorf("%s: virtio%d is %q, the holder's %s %q", n.name, d, nv, slot, hv)
				}
			}
			snippet := "local:snippets/milner-prod-" + n.name + "-talos.yaml"
			if !strings.Contains(node.Config["cicustom"], "user="+snippet) {
				t.Errorf("%s: cicustom %q does not name %s", n.name, node.Config["cicustom"], snippet)
			}
			v, ok := p.pve.Volumes(n.host, "local")[snippet]
			if !ok || v.Mode != 0o600 {
				t.Errorf("%s: snippet %s on %s: present %v, mode %#o; want 0600", n.name, snippet, n.host, ok, v.Mode)
			}
			tn := p.talos.Node(n.name)
			if tn.Config() == nil || string(tn.PersistedConfig()) != string(v.Data) {
				t.Errorf("%s: the Talos node does not run the snippet's config", n.name)
			}
		}
		j := p.talos.Journal()[talosMark:]
		for _, a := range j.Applies() {
			if a.Client.Insecure {
				t.Errorf("a config went over the LAN unauthenticated: %s", a)
			}
		}
		if boots := j.Calls("Bootstrap").Succeeded(); len(boots) != 1 {
			t.Errorf("want one Bootstrap, got:\n%s", strings.Join(j.Calls("Bootstrap").Strings(), "\n"))
		}
		reads, err := p.clusterAPI().Reads()
		noErr(t, err)
		if len(reads) == 0 {
			t.Errorf("no client read the cluster's API server: the health check did not run")
		}
		var ssh []string
		for _, e := range p.pve.Journal()[mark:] {
			if e.Method == "SSH" {
				ssh = append(ssh, e.String())
			}
		}
		t.Logf("SSH operations of the up:\n%s", strings.Join(ssh, "\n"))
	})

	step("no-op", func(t *testing.T, mark, talosMark int) {
		if r := p.must("preview"); !strings.Contains(r.stdout, "no changes") {
			t.Errorf("preview: want no changes")
		}
		p.must("up", "--yes")
		if w := p.writes(mark); len(w) > 0 {
			t.Errorf("a no-op wrote:\n%s", strings.Join(w, "\n"))
		}
		if a := p.talos.Journal()[talosMark:].Calls("ApplyConfiguration"); len(a) > 0 {
			t.Errorf("a no-op sent ApplyConfiguration:\n%s", strings.Join(a.Strings(), "\n"))
		}
	})

	step("one VM's memory changed", func(t *testing.T, mark, _ int) {
		p.node(1, func(n map[string]any) { n["memoryMiB"] = 20480 })
		r := p.milner("preview")
		if !strings.Contains(r.out(), "replace") || !strings.Contains(r.out(), "milner-prod-cp-2") {
			t.Errorf("preview: want cp-2's VM replaced")
		}
		r = p.milner("up", "--yes")
		p.refused("up without --replace", r, "--replace does not name it", "milner up --stack prod --replace cp-2", "nothing was applied")
		if w := p.writes(mark); len(w) > 0 {
			t.Errorf("the refused up wrote:\n%s", strings.Join(w, "\n"))
		}
	})

	step("milner up --replace cp-2", func(t *testing.T, mark, talosMark int) {
		before := p.pve.VMs()
		osVol, dataVol := volume(before[1151].Config["scsi0"]), volume(before[1151].Config["scsi1"])
		vols := p.pve.Volumes("pve-2", "local-lvm")
		p.must("up", "--yes", "--replace", "cp-2")
		j := p.merged(mark, talosMark)
		t.Logf("journal of the replace (%d entries):\n%s", len(j), strings.Join(j, "\n"))
		after := p.pve.VMs()
		if after[151].Config["memory"] != "20480" || after[151].Status != "running" {
			t.Errorf("cp-2's new VM: memory %q, %s", after[151].Config["memory"], after[151].Status)
		}
		for _, id := range []int{150, 152, 1150, 1151, 1152} {
			if fmt.Sprint(after[id]) != fmt.Sprint(before[id]) {
				t.Errorf("VM %d changed:\n%v\nwas\n%v", id, after[id], before[id])
			}
		}
		if volume(after[151].Config["virtio0"]) != osVol || volume(after[151].Config["virtio1"]) != dataVol {
			t.Errorf("cp-2's new VM attaches %q and %q, want the holder's %q and %q", after[151].Config["virtio0"], after[151].Config["virtio1"], osVol, dataVol)
		}
		now := p.pve.Volumes("pve-2", "local-lvm")
		for _, v := range []string{osVol, dataVol} {
			if string(now[v].Data) != string(vols[v].Data) || now[v].Size != vols[v].Size {
				t.Errorf("volume %s changed across the replace", v)
			}
		}
		var shutdown time.Time
		for _, e := range p.talos.Journal()[talosMark:] {
			if e.Name() == "Shutdown" && shutdown.IsZero() {
				if e.Node != "cp-2" {
					t.Errorf("Shutdown reached %s", e.Node)
				}
				shutdown = e.Time
			}
		}
		del := p.vmDeletedAlone(t, mark, "pve-2", 151, 1151)
		if shutdown.IsZero() || del.IsZero() || !shutdown.Before(del) {
			t.Errorf("want Talos' Shutdown of cp-2 (%v) before the VM's delete (%v)", shutdown, del)
		}
		if tn := p.talos.Node("cp-2"); !tn.Status().Booted || tn.Config() == nil {
			t.Errorf("cp-2 is not back with its config: %+v", tn.Status())
		}
		if a := p.talos.Journal()[talosMark:].Calls("ApplyConfiguration"); len(a) > 0 {
			t.Errorf("the replace sent ApplyConfiguration:\n%s", strings.Join(a.Strings(), "\n"))
		}
		if r := p.must("preview"); !strings.Contains(r.stdout, "no changes") {
			t.Errorf("preview after the replace: want no changes")
		}
	})

	step("a changed host key", func(t *testing.T, mark, _ int) {
		// pve-3 reinstalled, or a machine in its place: another host key
		// on 192.168.1.13:22. milner's pre-flight asks the host for its
		// key and refuses before anything is touched.
		sh := p.ssh["pve-3"]
		was := p.hostKeys["pve-3"]
		sh.SetHostKey(newHostKey(t))
		defer sh.SetHostKey(was)
		r := p.milner("up", "--yes")
		p.refused("up with pve-3's host key changed", r, `Proxmox host "pve-3" (192.168.1.13) shows another SSH host key`, "nothing was changed")
		if w := p.writes(mark); len(w) > 0 {
			t.Errorf("the refused up wrote:\n%s", strings.Join(w, "\n"))
		}
		// bpg itself, through the engine (no milner pre-flight): its
		// snippet upload to pve-3 (the snippet removed on the host and
		// forgotten by a refresh) refuses the changed key.
		p.pve.RemoveVolume("pve-3", "local", "local:snippets/milner-prod-cp-3-talos.yaml")
		st := p.engine()
		ctx := context.Background()
		if _, err := st.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		_, err := st.Up(ctx)
		if err == nil || !strings.Contains(err.Error(), "REMOTE HOST IDENTIFICATION HAS CHANGED for host 192.168.1.13:22") {
			t.Errorf("bpg's upload to pve-3 with its key changed: %v; want its refusal of the changed key", err)
		}
		sh.SetHostKey(was)
		p.must("up", "--yes")
		if v := p.pve.Volumes("pve-3", "local")["local:snippets/milner-prod-cp-3-talos.yaml"]; v.Mode != 0o600 {
			t.Errorf("the snippet uploaded again has mode %#o, want 0600", v.Mode)
		}
	})

	step("a Talos version bump", func(t *testing.T, mark, talosMark int) {
		sum := sha256.Sum256([]byte("talos v1.9.6 nocloud"))
		p.editConfig(func(cfg map[string]any) {
			cfg["milner:cluster"].(map[string]any)["talosVersion"] = "v1.9.6"
			cfg["milner:substrate"].(map[string]any)["proxmox"].(map[string]any)["imageSha256"] = hex.EncodeToString(sum[:])
		})
		r := p.milner("preview")
		p.refused("preview while the nodes run v1.9.5", r, "milner upgrade --stack prod")
		for _, n := range prodNodes {
			if !strings.Contains(r.stdout, "create  milner-prod-"+n.host+"-image-v1.9.6") {
				t.Errorf("preview: no image for %s", n.host)
			}
		}
		if strings.Contains(r.stdout, "milner-prod-cp-1 ") || strings.Contains(r.stdout, "-disks") {
			t.Errorf("preview: a VM in the bump's delta")
		}
		// The nodes upgrade in place through Talos; the record step leaves
		// the images to the up that follows (upgrade records configs only).
		p.must("upgrade", "--yes")
		p.must("up", "--yes")
		var writes []string
		for _, w := range p.writes(mark) {
			if !strings.Contains(w, "/storage/local/download-url") {
				writes = append(writes, w)
			}
		}
		if len(writes) > 0 {
			t.Errorf("the bump wrote more than image downloads:\n%s", strings.Join(writes, "\n"))
		}
		if got := p.talos.Journal()[talosMark:].Calls("Upgrade").Nodes(); len(got) != 3 {
			t.Errorf("Upgrade reached %v, want each node once", got)
		}
		if r := p.must("preview"); !strings.Contains(r.stdout, "no changes") {
			t.Errorf("preview after the upgrade: want no changes")
		}
	})

	step("a disk grow", func(t *testing.T, mark, _ int) {
		before := p.pve.VMs()
		dataVol := volume(before[1152].Config["scsi1"])
		p.node(2, func(n map[string]any) { n["dataDiskGiB"] = 160 })
		r := p.milner("up", "--yes")
		p.refused("a grow without --replace", r, "milner up --stack prod --replace cp-3")
		if w := p.writes(mark); len(w) > 0 {
			t.Errorf("the refused up wrote:\n%s", strings.Join(w, "\n"))
		}
		mark = len(p.pve.Journal())
		p.must("up", "--yes", "--replace", "cp-3")
		t.Logf("journal of the grow:\n%s", strings.Join(p.journalSince(mark), "\n"))
		after := p.pve.VMs()
		if v := p.pve.Volumes("pve-3", "local-lvm")[dataVol]; v.Size != 160*pveapi.GiB {
			t.Errorf("the data volume %s is %d bytes, want 160 GiB", dataVol, v.Size)
		}
		if volume(after[1152].Config["scsi1"]) != dataVol || volume(after[152].Config["virtio1"]) != dataVol {
			t.Errorf("the grown volume is not the same: holder %q, node VM %q, was %q", after[1152].Config["scsi1"], after[152].Config["virtio1"], dataVol)
		}
		for _, e := range p.pve.Journal()[mark:] {
			if e.Method == "DELETE" && strings.TrimSuffix(e.Path, "/") != "/nodes/pve-3/qemu/152" {
				t.Errorf("the grow deleted %s", e)
			}
		}
	})

	step("refused before any write", func(t *testing.T, mark, _ int) {
		for _, c := range []struct {
			what string
			edit func()
			undo func()
			want string
		}{
			// Two control planes on pve-2 need the override (config
			// validation refuses it first, naming the path).
			{"cp-1 moved to pve-2", func() {
				p.node(0, func(n map[string]any) { n["proxmoxNode"] = "pve-2" })
				p.editConfig(func(cfg map[string]any) {
					cfg["milner:substrate"].(map[string]any)["proxmox"].(map[string]any)["allowControlPlanesOnOneHost"] = true
				})
			}, func() {
				p.node(0, func(n map[string]any) { n["proxmoxNode"] = "pve-1" })
				p.editConfig(func(cfg map[string]any) {
					delete(cfg["milner:substrate"].(map[string]any)["proxmox"].(map[string]any), "allowControlPlanesOnOneHost")
				})
				// The holder's Protect fails the engine's own preview.
			}, `unable to replace resource "urn:pulumi:prod::milner::milner:components:ProxmoxSubstrate$proxmoxve:VM/virtualMachine:VirtualMachine::milner-prod-cp-1-disks"`},
			{"a new image URL at the same version", func() {
				p.editConfig(func(cfg map[string]any) {
					cfg["milner:substrate"].(map[string]any)["proxmox"].(map[string]any)["imageUrl"] = strings.Replace(imageURL("v1.9.6"), config.DefaultSchematic, strings.Repeat("ab", 32), 1)
				})
			}, func() {
				p.editConfig(func(cfg map[string]any) {
					delete(cfg["milner:substrate"].(map[string]any)["proxmox"].(map[string]any), "imageUrl")
				})
			}, "nothing was applied"},
			{"a disk shrink", func() { p.node(0, func(n map[string]any) { n["dataDiskGiB"] = 100 }) },
				func() { p.node(0, func(n map[string]any) { n["dataDiskGiB"] = 128 }) }, "would shrink from 128 to 100 GiB"},
		} {
			c.edit()
			for _, args := range [][]string{{"up", "--yes"}, {"up", "--yes", "--replace", "cp-1"}} {
				r := p.milner(args...)
				p.refused(c.what+": milner "+strings.Join(args, " "), r, c.want)
			}
			if w := p.writes(mark); len(w) > 0 {
				t.Errorf("%s: the refused up wrote:\n%s", c.what, strings.Join(w, "\n"))
			}
			if tn := p.talos.Node("cp-1"); !tn.Status().Booted {
				t.Errorf("%s: cp-1 is down", c.what)
			}
			c.undo()
		}
	})

	step("guards", func(t *testing.T, mark, _ int) {
		// The stack's state lost: a fresh project on the same cluster,
		// its substrate alone (the Talos layer's recovery is the secrets
		// import of docs/runbooks/recover.md, run on libvirt).
		// Its stack file is the operator's as it stands now (cp-2's
		// memory, cp-3's data disk, the Talos version changed above;
		// committed, unlike the state), its own token secret.
		var current map[string]any
		p.editConfig(func(cfg map[string]any) { current = cfg })
		fresh := p.project()
		fresh.editConfig(func(cfg map[string]any) {
			for _, k := range []string{"milner:cluster", "milner:substrate", "milner:nodes"} {
				cfg[k] = current[k]
			}
			cfg["milner:stopAfter"] = "substrate"
		})
		r := fresh.milner("up", "--yes")
		p.refused("up with empty state and live VMs", r, "milner adopt")
		// A node VM recreated out of band: the same name, a new vm id.
		v := p.pve.VMs()[152]
		p.pve.RemoveVM(152)
		moved := v
		moved.VMID = 162
		p.pve.AddVM(moved)
		r = p.milner("up", "--yes")
		p.refused("up with cp-3's VM recreated as 162", r, "162")
		p.pve.RemoveVM(162)
		p.pve.AddVM(v)
		if w := p.writes(mark); len(w) > 0 {
			t.Errorf("the refused runs wrote:\n%s", strings.Join(w, "\n"))
		}
		// Adopt every node's holder and VM by import in the fresh project:
		// each adoption's preview, and the preview after all six, plan their
		// import with no diff, and neither a create nor a replace of them
		// (components/substrate proxmoxNoCDROM, proxmoxImportUnread: bpg's
		// import read a node VM's CD-ROM drive as a disk and left blocks at
		// their defaults unread, which planned a replace of the node VM).
		// Nothing is written: the imports happen at the next up.
		mark = len(p.pve.Journal())
		for _, n := range prodNodes {
			fresh.must("adopt", "--node", n.name, "--holder", "--id", fmt.Sprint(n.vmid+1000))
			fresh.must("adopt", "--node", n.name, "--id", fmt.Sprint(n.vmid))
		}
		r = fresh.milner("preview")
		for _, n := range prodNodes {
			for _, name := range []string{"milner-prod-" + n.name + "-disks", "milner-prod-" + n.name} {
				imported := false
				for _, line := range strings.Split(r.stdout, "\n") {
					f := strings.Fields(line)
					if len(f) < 2 || f[1] != name {
						continue
					}
					switch f[0] {
					case "import":
						imported = true
						if strings.Contains(line, "): ") {
							t.Errorf("the adopted %s is imported with a diff: %s", name, line)
						}
					case "create", "replace", "update", "delete":
						t.Errorf("after the adoption the preview plans %s", strings.TrimSpace(line))
					}
				}
				if !imported {
					t.Errorf("the preview after the adoption does not import %s", name)
				}
			}
		}
		if w := p.writes(mark); len(w) > 0 {
			t.Errorf("the adoption wrote:\n%s", strings.Join(w, "\n"))
		}
		// The up after it imports the six VMs and creates each host's
		// image resource: the files are on the hosts but in no state, and
		// bpg's download_file has no importer (fwprovider/nodes/
		// resource_download_file.go: no ImportState). Run unpinned, as
		// the committed Pulumi.prod.yaml is (no imageSha256): PVE refuses
		// to download over a file without a checksum to verify it by
		// (PVE::Tools::download_file_from_url), and bpg, with
		// overwrite_unmanaged (components/substrate newProxmoxImages),
		// deletes this cluster's file and downloads it again (before, the
		// up failed: "File already exists in the datastore"). A pinned
		// image is kept by PVE as it is (its checksum matches; the double's
		// TestDownloadOverAnExistingFile). No VM is written.
		fresh.editConfig(func(cfg map[string]any) {
			delete(cfg["milner:substrate"].(map[string]any)["proxmox"].(map[string]any), "imageSha256")
		})
		mark = len(p.pve.Journal())
		fresh.must("up", "--yes")
		w := p.writes(mark)
		t.Logf("the up after the adoption wrote:\n%s", strings.Join(w, "\n"))
		deleted, downloads := 0, 0
		for _, e := range w {
			switch {
			case strings.Contains(e, "/storage/local/content/"):
				if !strings.HasPrefix(e, "DELETE ") || !strings.Contains(e, "milner-prod-talos-") {
					t.Errorf("the up after the adoption wrote a file other than an image: %s", e)
				}
				deleted++
			case strings.Contains(e, "/storage/local/download-url "):
				downloads++
			case strings.Contains(e, "/tasks/UPID:"):
			default:
				t.Errorf("the up after the adoption wrote more than the images: %s", e)
			}
		}
		if deleted != len(hosts) || downloads != 2*len(hosts) {
			t.Errorf("the up after the adoption deleted %d images and asked %d downloads, want %d and %d (per host: refused, deleted, downloaded)", deleted, downloads, len(hosts), 2*len(hosts))
		}
		r = fresh.milner("preview")
		if r.code != 0 || !strings.Contains(r.stdout, "no changes") {
			t.Errorf("the preview after the adopting up is not a no-op:\n%s", r.stdout)
		}
	})

	step("add a worker", func(t *testing.T, mark, talosMark int) {
		w := addedWorker
		p.grow(w)
		// Control planes alone schedule pods by default; the first worker
		// turns that default off, so Vault's three peers would have one
		// node: refused, naming the cause. Kept on, as the cluster runs.
		r := p.milner("preview")
		p.refused("adding a worker to control planes scheduling by default", r,
			"3 raft peers but 1 nodes take workloads", "milner:cluster.allowSchedulingOnControlPlanes is unset, which means false once the stack has a worker")
		p.editConfig(func(cfg map[string]any) {
			cfg["milner:cluster"].(map[string]any)["allowSchedulingOnControlPlanes"] = true
		})
		p.add(w, mark)
	})

	step("add a fourth control plane", func(t *testing.T, mark, talosMark int) {
		// Four control planes on three hosts: two share one (validation
		// refuses it without the override; Pulumi.prod.yaml's placement).
		p.editConfig(func(cfg map[string]any) {
			cfg["milner:substrate"].(map[string]any)["proxmox"].(map[string]any)["allowControlPlanesOnOneHost"] = true
		})
		p.grow(addedControlPlane)
		up, end := p.add(addedControlPlane, mark)
		if !strings.Contains(up.out(), "4 control planes") {
			t.Errorf("no warning of an even etcd membership:\n%s", up.out())
		}
		if p.talos.Node("cp-4").Status().EtcdMemberID == 0 {
			t.Errorf("cp-4 is no etcd member after the up")
		}
		// It joined as a learner; the up ended once it was promoted, at
		// least the promotion's delay after cp-4 booted.
		if l := p.talos.EtcdLearners(); len(l) > 0 || !strings.Contains(up.stdout, "cp-4: a voting etcd member") {
			t.Errorf("the up ended with learners %v, or did not wait for cp-4's promotion:\n%s", l, up.out())
		}
		boots := p.talos.Journal()[talosMark:].On("cp-4").Events("boot")
		if len(boots) == 0 || end.Sub(boots[0].Time) < learnerPromotion {
			t.Errorf("the up ended at %v, less than %v after cp-4's boot (%v): it did not wait for the promotion", end, learnerPromotion, boots)
		}
	})

	step("remove a control plane", func(t *testing.T, mark, talosMark int) {
		before, members := p.pve.VMs(), p.talos.EtcdMembers()
		holder := before[1152]
		p.editConfig(func(cfg map[string]any) {
			cfg["milner:nodes"] = slices.DeleteFunc(cfg["milner:nodes"].([]any), func(n any) bool { return n.(map[string]any)["name"] == "cp-3" })
		})
		r := p.must("up", "--yes", "--remove", "cp-3")
		t.Logf("journal of cp-3's removal:\n%s", strings.Join(p.merged(mark, talosMark), "\n"))
		var removed, shutdown time.Time
		for _, e := range p.talos.Journal()[talosMark:] {
			switch e.Name() {
			case "EtcdRemoveMemberByID":
				if e.Node == "cp-3" || e.Err != nil || !removed.IsZero() {
					t.Errorf("want one member removal through another control plane: %s", e)
				}
				removed = e.Done
			case "Shutdown":
				if e.Node != "cp-3" {
					t.Errorf("Shutdown reached %s", e.Node)
				}
				shutdown = e.Time
			case "Reset", "Reboot":
				t.Errorf("%s was sent: %s", e.Name(), e)
			}
		}
		del := p.vmDeletedAlone(t, mark, "pve-3", 152, 1152)
		if removed.IsZero() || shutdown.IsZero() || del.IsZero() || !removed.Before(shutdown) || !shutdown.Before(del) {
			t.Errorf("want the member removal (%v), then the Shutdown (%v), then the VM's delete (%v)", removed, shutdown, del)
		}
		after := p.pve.VMs()
		if _, ok := after[152]; ok {
			t.Errorf("cp-3's VM 152 is still there")
		}
		if fmt.Sprint(after[1152]) != fmt.Sprint(holder) {
			t.Errorf("cp-3's disk holder changed:\n%v\nwas\n%v", after[1152], holder)
		}
		got := p.talos.EtcdMembers()
		delete(members, "cp-3")
		if !maps.Equal(got, members) {
			t.Errorf("etcd members %v, want %v", got, members)
		}
		if want := "pvesh set /nodes/pve-3/qemu/1152 --protection 0 && pvesh delete /nodes/pve-3/qemu/1152"; !strings.Contains(r.stdout, want) {
			t.Errorf("the up does not list the holder with %q:\n%s", want, r.stdout)
		}
		if r := p.must("preview"); !strings.Contains(r.stdout, "no changes") {
			t.Errorf("preview after the removal: want no changes")
		}
		// What the printed command does; the teardown then finds no VM left.
		p.pve.RemoveVM(1152)
		for id := range p.pve.Volumes("pve-3", "local-lvm") {
			p.pve.RemoveVolume("pve-3", "local-lvm", id)
		}
	})

	step("teardown", func(t *testing.T, mark, _ int) {
		r := p.milner("teardown")
		if r.code == 0 {
			t.Errorf("teardown without confirmation exited 0")
		}
		if w := p.writes(mark); len(w) > 0 {
			t.Errorf("an unconfirmed teardown wrote:\n%s", strings.Join(w, "\n"))
		}
		for _, n := range []prodNode{prodNodes[0], prodNodes[1], addedWorker, addedControlPlane} { // cp-3 was removed
			if !strings.Contains(r.stdout, "milner-prod-"+n.name+"-userdata (retained") {
				t.Errorf("teardown does not list %s's snippet as retained", n.name)
			}
		}
		confirmed := len(p.pve.Journal())
		p.must("teardown", "--yes")
		t.Logf("the confirmed teardown's writes:\n%s", strings.Join(p.writes(confirmed), "\n"))
		if vms := p.pve.VMs(); len(vms) > 0 {
			t.Errorf("VMs left after the teardown: %v", slices.Sorted(maps.Keys(vms)))
		}
		for _, h := range hosts {
			if left := slices.Sorted(maps.Keys(p.pve.Volumes(h.Name, "local-lvm"))); len(left) > 0 {
				t.Errorf("%s: disks left: %v", h.Name, left)
			}
			kept := slices.Sorted(maps.Keys(p.pve.Volumes(h.Name, "local")))
			t.Logf("%s: retained on local: %v", h.Name, kept)
		}
	})
}

// add runs the addition of n, already in the world and the stack config
// (grow), from mark on the PVE journal: the preview creates n's substrate
// (its VM, its disk holder, its snippet) and its Talos apply, and plans
// nothing else (the other control planes' configs do not change: the
// endpoint is the VIP and no certSAN names a node); the up writes n's
// holder, VM and snippet alone, n boots configured from its snippet
// (never in maintenance mode), its apply goes over mTLS, no Bootstrap;
// then a no-op preview and up. It returns the up and when it ended.
func (p *prod) add(n prodNode, mark int) (result, time.Time) {
	t := p.t
	t.Helper()
	before := p.pve.VMs()
	r := p.must("preview")
	onlyAdds(t, r, n.name)
	base := "milner-prod-" + n.name
	for _, name := range []string{base, base + "-disks", base + "-userdata", n.name + "-apply"} {
		if !regexp.MustCompile(`(?m)^\s+create\s+` + regexp.QuoteMeta(name) + ` `).MatchString(r.stdout) {
			t.Errorf("the preview does not create %s", name)
		}
	}
	if w := p.writes(mark); len(w) > 0 {
		t.Errorf("the preview wrote:\n%s", strings.Join(w, "\n"))
	}
	mark, talosMark := len(p.pve.Journal()), len(p.talos.Journal())
	start := time.Now()
	up := p.must("up", "--yes")
	end := time.Now()
	t.Logf("journal of %s's addition (the up: %s):\n%s", n.name, end.Sub(start).Round(time.Second), strings.Join(p.merged(mark, talosMark), "\n"))
	ids := []string{fmt.Sprint(n.vmid), fmt.Sprint(n.vmid + 1000)}
	snippet := "local:snippets/" + base + "-talos.yaml"
	for _, e := range p.writes(mark) {
		ours := strings.Contains(e, base+"-talos.yaml")
		for _, id := range ids {
			ours = ours || strings.Contains(e, "/qemu/"+id+"/") || strings.Contains(e, ":"+id+":") || regexp.MustCompile(`\bvmid=`+id+`\b`).MatchString(e)
		}
		if !ours {
			t.Errorf("adding %s wrote: %s", n.name, e)
		}
	}
	after := p.pve.VMs()
	for id, v := range before {
		if fmt.Sprint(after[id]) != fmt.Sprint(v) {
			t.Errorf("VM %d changed:\n%v\nwas\n%v", id, after[id], v)
		}
	}
	node, holder := after[n.vmid], after[n.vmid+1000]
	if node.Node != n.host || node.Status != "running" || holder.Node != n.host || holder.Status != "stopped" || holder.Config["protection"] != "1" {
		t.Errorf("%s: node VM on %s %s, holder on %s %s protection %q", n.name, node.Node, node.Status, holder.Node, holder.Status, holder.Config["protection"])
	}
	for d, slot := range []string{"scsi0", "scsi1"} {
		if hv, nv := volume(holder.Config[slot]), volume(node.Config[fmt.Sprintf("virtio%d", d)]); hv == "" || hv != nv {
			t.Errorf("%s: virtio%d is %q, the holder's %s %q", n.name, d, nv, slot, hv)
		}
	}
	v, ok := p.pve.Volumes(n.host, "local")[snippet]
	if !ok || v.Mode != 0o600 {
		t.Errorf("%s: snippet %s: present %v, mode %#o; want 0600", n.name, snippet, ok, v.Mode)
	}
	tn := p.talos.Node(n.name)
	if tn.Config() == nil || string(tn.PersistedConfig()) != string(v.Data) {
		t.Errorf("%s does not run its snippet's config", n.name)
	}
	j := p.talos.Journal()[talosMark:]
	boots := j.Events("boot")
	for _, e := range boots {
		if e.Node != n.name || e.Detail != "configured" {
			t.Errorf("a boot other than %s's, configured: %s", n.name, e)
		}
	}
	if len(boots) == 0 {
		t.Errorf("%s did not boot", n.name)
	}
	a := j.Applies()
	if len(a) == 0 {
		t.Errorf("no apply to %s", n.name)
	}
	for _, e := range a {
		if e.Node != n.name || e.Client.Insecure || e.Err != nil {
			t.Errorf("want applies to %s alone, authenticated, succeeded: %s", n.name, e)
		}
	}
	if b := j.Calls("Bootstrap"); len(b) > 0 {
		t.Errorf("adding %s bootstrapped:\n%s", n.name, strings.Join(b.Strings(), "\n"))
	}
	mark = len(p.pve.Journal())
	if r := p.must("preview"); !strings.Contains(r.stdout, "no changes") {
		t.Errorf("preview after adding %s: want no changes", n.name)
	}
	p.must("up", "--yes")
	if w := p.writes(mark); len(w) > 0 {
		t.Errorf("the up after adding %s wrote:\n%s", n.name, strings.Join(w, "\n"))
	}
	return up, end
}

// onlyAdds requires a preview's delta by layer to create node's resources
// and nothing else: no create of another's, no update, replace, delete or
// import.
func onlyAdds(t *testing.T, r result, node string) {
	t.Helper()
	creates := 0
	for _, m := range regexp.MustCompile(`(?m)^\s+(create|update|replace|delete|import)\s+(\S+)`).FindAllStringSubmatch(r.stdout, -1) {
		switch op, name := m[1], m[2]; {
		case op == "create" && (name == node || strings.HasSuffix(name, "-"+node) || strings.Contains(name, "-"+node+"-") || strings.HasPrefix(name, node+"-")):
			creates++
		default:
			t.Errorf("adding %s plans %s %s", node, op, name)
		}
	}
	if creates == 0 {
		t.Errorf("adding %s creates nothing:\n%s", node, r.out())
	}
}
