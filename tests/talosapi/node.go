package talosapi

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/impl/inmem"
	"github.com/cosi-project/runtime/pkg/state/impl/namespaced"
	"github.com/google/uuid"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
)

// DefaultVersion is the Talos version a node runs unless WithVersion says
// otherwise: the version Milner's stacks run.
const DefaultVersion = "v1.13.9"

// Node is one Talos machine: its disks, the config on its STATE partition,
// the config it runs, and the API it serves while powered on.
type Node struct {
	c    *Cluster
	name string
	opts nodeOptions
	// life serializes power-on, power-off, reboots and wipes of this node.
	life sync.Mutex

	// The rest is guarded by c.mu.
	addr netip.AddrPort
	// st holds the node's COSI resources (resources.go); a wipe replaces it.
	st state.State
	// persisted is the config on the STATE partition (what the next boot
	// runs), active the one running, platform the platform's user-data
	// (nocloud), read at boot when the STATE partition holds none.
	persisted, active, platform *machineConfig
	inc                         *incarnation // nil while powered off or between boots
	bootID                      string
	bootedAt                    time.Time // when this boot began: time sync counts from it
	reachable                   bool
	booted                      bool // boot sequence done (Talos: CRI up; MachineStatus running)
	version, nextVersion        string
	etcdData                    bool // etcd's data directory is not empty
	member                      *member
	etcdRunning                 bool
	etcdErrors                  []string
	recovery                    []byte // the snapshot EtcdRecover uploaded (recover.go)
	etcdFailed                  string // why the etcd service failed to start (a recover)
	nodeReady                   bool
	faults                      map[string]error
	images                      map[string][]string // pulled, by containerd instance (lifecycle.go)
	tryRollback                 *time.Timer
	readyTimer                  *time.Timer
	// events are what machined published during this boot (events.go);
	// eventsMore is closed when one more is published.
	events     []nodeEvent
	eventsMore chan struct{}
	// cordoned: the double cordoned the node's Kubernetes Node (drain.go).
	cordoned bool
	// addressed: the node's link holds its address this boot (network.go).
	addressed bool
	// haltedHard: the last halt was a power cut, not Talos' shutdown or
	// reboot sequence (vip.go: its VIP lease runs out instead of resigning).
	haltedHard bool
	// campaigning is when the node began its VIP campaign (zero: not
	// campaigning; vip.go).
	campaigning time.Time
}

// machineConfig is a machine config as a node holds it: its bytes and
// machinery's parsed form.
type machineConfig struct {
	raw []byte
	cfg config.Provider
}

func parseConfig(raw []byte) (*machineConfig, error) {
	cfg, err := configloader.NewFromBytes(raw)
	if err != nil {
		return nil, err
	}
	return &machineConfig{raw: raw, cfg: cfg}, nil
}

type nodeOptions struct {
	version      string
	platform     Platform
	disks        []Disk
	memoryMiB    uint64
	manualReady  bool
	bootDelay    time.Duration
	off          bool
	platformUser []byte
	mac          string // network.go
	noLease      bool
}

// NodeOption configures a node.
type NodeOption func(*nodeOptions)

// WithVersion is the Talos version the node runs (default DefaultVersion).
func WithVersion(v string) NodeOption { return func(o *nodeOptions) { o.version = v } }

// WithPlatform sets the platform Version reports and config validation
// runs under (default Metal).
func WithPlatform(p Platform) NodeOption { return func(o *nodeOptions) { o.platform = p } }

// WithDisks sets the node's disks (default: one 10 GiB virtio disk,
// /dev/vda).
func WithDisks(d ...Disk) NodeOption { return func(o *nodeOptions) { o.disks = d } }

// WithMemoryMiB sets the memory the node reports (default 4096).
func WithMemoryMiB(m uint64) NodeOption { return func(o *nodeOptions) { o.memoryMiB = m } }

// WithManualReady keeps a configured node booting (Bootstrap answers
// FailedPrecondition, MachineStatus is not running) until MarkReady.
func WithManualReady() NodeOption { return func(o *nodeOptions) { o.manualReady = true } }

// WithBootDelay makes a configured node finish booting d after it boots.
func WithBootDelay(d time.Duration) NodeOption { return func(o *nodeOptions) { o.bootDelay = d } }

// WithPoweredOff adds the node powered off (PowerOn boots it).
func WithPoweredOff() NodeOption { return func(o *nodeOptions) { o.off = true } }

// WithPlatformConfig gives the node a platform config (nocloud user-data)
// it boots with while its STATE partition holds none.
func WithPlatformConfig(cfg []byte) NodeOption {
	return func(o *nodeOptions) { o.platformUser = cfg }
}

// Platform is the platform a node runs on, as Version reports it and as
// config validation sees it (internal/app/machined/pkg/runtime/mode.go).
type Platform struct {
	// Name is the platform's name ("metal", "nocloud").
	Name string
	// Mode is "metal" or "cloud": metal requires an install disk.
	Mode string
}

// The platforms Milner's substrates boot.
var (
	// Metal is a machine booted from Talos' ISO (libvirt).
	Metal = Platform{Name: "metal", Mode: "metal"}
	// Nocloud is a machine booted from Talos' nocloud disk image (PVE).
	Nocloud = Platform{Name: "nocloud", Mode: "cloud"}
)

// Disk is a block device of a node (a block.Disk resource).
type Disk struct {
	// DevPath is the device, e.g. /dev/vda.
	DevPath string
	// Size is its size in bytes.
	Size uint64
}

const gib = 1 << 30

func newNode(c *Cluster, name string, addr netip.AddrPort) *Node {
	return &Node{
		c: c, name: name, addr: addr,
		opts:      nodeOptions{version: DefaultVersion, platform: Metal, disks: []Disk{{DevPath: "/dev/vda", Size: 10 * gib}}, memoryMiB: 4096},
		st:        newState(),
		reachable: true, etcdRunning: true, nodeReady: true,
		faults: map[string]error{},
	}
}

func newState() state.State { return state.WrapCore(namespaced.NewState(inmem.Build)) }

func (n *Node) applyOptions() error {
	n.version = n.opts.version
	if n.opts.mac == "" {
		n.opts.mac = defaultMAC(n.addr.Addr())
	}
	if n.opts.platform.Mode != "metal" && n.opts.platform.Mode != "cloud" {
		return fmt.Errorf("platform mode %q: want metal or cloud", n.opts.platform.Mode)
	}
	if n.opts.platformUser != nil {
		mc, err := validConfig(n.opts.platformUser, n.validationMode(false))
		if err != nil {
			return fmt.Errorf("platform config: %w", err)
		}
		n.platform = mc
	}
	return nil
}

// Name is the node's name: its hostname unless its config sets another.
func (n *Node) Name() string { return n.name }

// Addr is where the node listens (its port chosen once it first listened).
func (n *Node) Addr() netip.AddrPort {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	return n.addr
}

// IP is the node's address as apid and the health checks name it.
func (n *Node) IP() netip.Addr { return n.addr.Addr() }

// Endpoint is the address a client dials (ip:port).
func (n *Node) Endpoint() string { return n.Addr().String() }

// hostnameLocked is the node's hostname: its config's, else its name.
func (n *Node) hostnameLocked() string {
	if n.active != nil {
		if hc := n.active.cfg.NetworkHostnameConfig(); hc != nil && hc.Hostname() != "" {
			return hc.Hostname()
		}
	}
	return n.name
}

// controlPlaneLocked reports a node whose running config is a control
// plane's (init or controlplane).
func (n *Node) controlPlaneLocked() bool {
	return n.active != nil && n.active.cfg.Machine().Type().IsControlPlane()
}

// Status is a snapshot of a node.
type Status struct {
	// On is a powered-on node (booting, running or in maintenance).
	On bool
	// Reachable is false while the node's network is cut (SetReachable).
	Reachable bool
	// Maintenance is a node running without a config.
	Maintenance bool
	// Booted is a configured node whose boot sequence finished.
	Booted bool
	// Version is the Talos version it runs.
	Version string
	// BootID is the current boot's ID ("" while off).
	BootID string
	// EtcdMemberID is its etcd member's ID (0: not a member).
	EtcdMemberID uint64
	// Pending is a config on the STATE partition that differs from the one
	// running (a STAGED apply waiting for a reboot).
	Pending bool
}

// Status returns the node's state.
func (n *Node) Status() Status {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	s := Status{On: n.inc != nil, Reachable: n.reachable, Booted: n.booted, Version: n.version, BootID: n.bootID}
	s.Maintenance = s.On && n.active == nil
	if n.member != nil {
		s.EtcdMemberID = n.member.id
	}
	s.Pending = n.persisted != nil && (n.active == nil || string(n.persisted.raw) != string(n.active.raw))
	return s
}

// Config is the config the node runs (nil in maintenance mode or off).
func (n *Node) Config() []byte {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	if n.active == nil {
		return nil
	}
	return slices.Clone(n.active.raw)
}

// PersistedConfig is the config on the node's STATE partition, the one its
// next boot runs (nil: none).
func (n *Node) PersistedConfig() []byte {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	if n.persisted == nil {
		return nil
	}
	return slices.Clone(n.persisted.raw)
}

// PowerOn boots a powered-off node; a running node is left alone.
func (n *Node) PowerOn() error {
	n.life.Lock()
	defer n.life.Unlock()
	n.c.mu.Lock()
	on := n.inc != nil
	n.c.mu.Unlock()
	if on {
		return nil
	}
	return n.boot()
}

// PowerOff stops the node at once (a VM's power cut: no shutdown
// sequence, no hook).
func (n *Node) PowerOff() error {
	n.life.Lock()
	defer n.life.Unlock()
	n.halt("power-off", "")
	return nil
}

// PowerCycle powers the node off and on (a VM reset, not a Talos reboot
// call); journaled as a "reboot" event with cause "power-cycle".
func (n *Node) PowerCycle() error {
	n.life.Lock()
	defer n.life.Unlock()
	n.halt("reboot", "power-cycle")
	return n.boot()
}

// Wipe gives the node a fresh OS disk: no config on its STATE partition,
// an empty etcd data directory (its old etcd member stays listed until
// removed), fresh resources. A running node boots again: into maintenance
// mode, or with its platform config if it has one (Talos reads the
// platform's config when the STATE partition holds none).
func (n *Node) Wipe() error {
	n.life.Lock()
	defer n.life.Unlock()
	n.c.mu.Lock()
	on := n.inc != nil
	n.c.mu.Unlock()
	n.halt("wipe", "")
	n.c.mu.Lock()
	n.persisted, n.active, n.etcdData, n.member, n.images = nil, nil, false, nil, nil
	n.st = newState()
	n.c.mu.Unlock()
	if !on {
		return nil
	}
	return n.boot()
}

// Configure boots the node with cfg as Talos' nocloud platform hands it
// over at boot: the node must hold no config yet (Talos never reads the
// platform's config over one on its STATE partition). A running node in
// maintenance mode boots again with it; a powered-off one keeps it for its
// power-on. No ApplyConfiguration call is made or journaled.
func (n *Node) Configure(cfg []byte) error {
	mc, err := validConfig(cfg, n.validationMode(false))
	if err != nil {
		return fmt.Errorf("node %q: %w", n.name, err)
	}
	n.life.Lock()
	defer n.life.Unlock()
	n.c.mu.Lock()
	if n.persisted != nil {
		n.c.mu.Unlock()
		return fmt.Errorf("node %q: already has a config on its STATE partition", n.name)
	}
	n.platform = mc
	on := n.inc != nil
	n.c.mu.Unlock()
	if !on {
		return nil
	}
	n.halt("", "")
	return n.boot()
}

// SetPlatformConfig sets the platform config (nocloud user-data) the node
// reads at its next boot if its STATE partition holds none; nil removes
// it.
func (n *Node) SetPlatformConfig(cfg []byte) error {
	var mc *machineConfig
	if cfg != nil {
		var err error
		if mc, err = validConfig(cfg, n.validationMode(false)); err != nil {
			return fmt.Errorf("node %q: platform config: %w", n.name, err)
		}
	}
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	n.platform = mc
	return nil
}

// MarkReady finishes a configured node's boot (see WithManualReady).
func (n *Node) MarkReady() {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	n.markReadyLocked(n.inc)
}

func (n *Node) markReadyLocked(inc *incarnation) {
	if inc == nil || n.inc != inc || n.active == nil || n.booted {
		return
	}
	n.booted = true
	n.c.syncLocked()
}

// SetReachable cuts (false) or restores the node's network: while cut,
// nothing reaches its API (connections are refused) and its etcd member
// is unreachable to the others; the node itself keeps running.
func (n *Node) SetReachable(reachable bool) error {
	n.life.Lock()
	defer n.life.Unlock()
	n.c.mu.Lock()
	n.reachable = reachable
	inc, addressed := n.inc, n.addressed
	n.c.syncLocked()
	n.c.mu.Unlock()
	if inc == nil {
		return nil
	}
	if !reachable || !addressed {
		inc.stopFront()
		return nil
	}
	return inc.startFront()
}

// SetVersion sets the Talos version the node reports (e.g. in an OnBoot
// hook: the node booted another image than it was upgraded to).
func (n *Node) SetVersion(v string) {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	n.version = v
}

// SetNodeReady sets whether the node's Kubernetes Node is Ready, as its
// MachineStatus (nodeReady) and the kubelet objects report it.
func (n *Node) SetNodeReady(ready bool) {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	n.nodeReady = ready
	n.c.syncLocked()
}

// SetEtcdRunning sets whether the node's etcd runs: a control plane whose
// etcd is down answers EtcdStatus and EtcdAlarmList with errors and its
// member counts as down. A reset that wipes EPHEMERAL gives etcd a fresh
// data directory, and it runs again.
func (n *Node) SetEtcdRunning(running bool) {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	n.etcdRunning = running
	n.c.syncLocked()
}

// SetEtcdErrors sets the errors etcd reports in the node's member status
// (EtcdStatus).
func (n *Node) SetEtcdErrors(errs ...string) {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	n.etcdErrors = errs
}

// FailCalls makes every call of method (its last element, e.g. "Upgrade")
// on this node fail with err until ClearFailures, for failures Talos has
// causes for that the double does not model (an installer image that
// cannot be pulled). Pass Talos' own error text.
func (n *Node) FailCalls(method string, err error) {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	n.faults[method] = err
}

// ClearFailures undoes FailCalls.
func (n *Node) ClearFailures() {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	clear(n.faults)
}

// boot starts the node with the config its STATE partition holds, else
// its platform's, else in maintenance mode (n.life held).
func (n *Node) boot() error {
	c := n.c
	c.mu.Lock()
	if n.persisted == nil && n.platform != nil {
		n.persisted = n.platform
	}
	n.active = n.persisted
	if n.nextVersion != "" {
		n.version, n.nextVersion = n.nextVersion, ""
	}
	n.bootID = uuid.NewString()
	n.bootedAt = time.Now()
	n.booted = false
	n.events = nil
	mode := "configured"
	if n.active == nil {
		mode = "maintenance"
	}
	n.eventLocked("boot", mode)
	n.haltedHard = false
	net := n.networkLocked()
	n.addressed = net.addressed
	if !net.addressed || len(net.skipped) > 0 {
		n.eventLocked("network", n.networkDetail(net))
	}
	c.mu.Unlock()

	for _, f := range c.opts.onBoot {
		f(n)
	}

	c.mu.Lock()
	inc, err := n.newIncarnationLocked()
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("node %q: boot: %w", n.name, err)
	}
	if err := inc.start(); err != nil {
		return fmt.Errorf("node %q: boot: %w", n.name, err)
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	n.inc = inc
	if n.cordoned && n.active != nil {
		// Talos' controllers uncordon what they cordoned once the node
		// boots again (drain.go uncordon).
		n.cordoned = false
		go n.uncordon(n.hostnameLocked())
	}
	if n.active != nil && !n.opts.manualReady {
		if n.opts.bootDelay == 0 {
			n.booted = true
		} else {
			n.readyTimer = time.AfterFunc(n.opts.bootDelay, func() {
				c.mu.Lock()
				defer c.mu.Unlock()
				n.markReadyLocked(inc)
			})
		}
	}
	c.syncLocked()
	return nil
}

// halt stops the node's API and everything running (n.life held),
// journaling event unless it is "".
func (n *Node) halt(event, detail string) {
	c := n.c
	c.mu.Lock()
	inc := n.inc
	if inc == nil {
		c.mu.Unlock()
		return
	}
	if event != "" {
		n.eventLocked(event, detail)
	}
	// A power cut or a disk swap runs no shutdown sequence; Talos' own
	// reboots and shutdowns do.
	n.haltedHard = event == "power-off" || event == "wipe" || detail == "power-cycle"
	n.inc, n.booted = nil, false
	for _, t := range []*time.Timer{n.tryRollback, n.readyTimer} {
		if t != nil {
			t.Stop()
		}
	}
	n.tryRollback, n.readyTimer = nil, nil
	c.syncLocked()
	c.mu.Unlock()
	inc.stop()
}

// rebootLater reboots the node in the background, as machined runs its
// reboot sequence after answering the call that asked for it: cause is
// that call. The call's answer is sent before the node goes down.
func (n *Node) rebootLater(cause string) {
	go func() {
		n.life.Lock()
		defer n.life.Unlock()
		n.halt("reboot", cause)
		time.Sleep(n.c.opts.rebootDown)
		_ = n.boot() // a failed boot leaves the node off, which the journal shows
	}()
}

// shutdownLater runs the shutdown sequence in the background after the
// call that asked for it was answered: the drain phase (phase 2 of talos
// v1.13.9 Sequencer.Shutdown) when drain, then the power-off and the
// OnShutdown hooks. A failed drain stops there, the node running.
func (n *Node) shutdownLater(event, actorID string, drain bool) {
	go func() {
		if drain && !n.drainPhase(actorID, "shutdown", 2) {
			return
		}
		n.life.Lock()
		n.halt(event, "")
		n.life.Unlock()
		for _, f := range n.c.opts.onShutdown {
			f(n)
		}
	}()
}

// upgradeLater runs the upgrade sequence in the background after Upgrade
// answered: the drain (phase 1 of talos v1.13.9 Sequencer.Upgrade), then
// the install and the reboot into it. A failed drain stops there, the node
// running its version.
func (n *Node) upgradeLater(image, actorID string) {
	go func() {
		n.c.mu.Lock()
		boot := n.bootID
		n.c.mu.Unlock()
		if !n.drainPhase(actorID, "upgrade", 1) {
			return
		}
		n.c.mu.Lock()
		if n.bootID != boot || n.inc == nil {
			n.c.mu.Unlock()
			return
		}
		n.installLocked(image)
		n.c.mu.Unlock()
		n.rebootLater("Upgrade")
	}()
}

// drainPhase is phase number phase, "drain", of sequence seq: its events
// as Controller.run and runTask publish them (SequenceEvent START,
// PhaseEvent and TaskEvent cordonAndDrainNode START and STOP), the drain,
// and when it fails the sequence's failure (sequenceFailedLocked, in
// machined's words: "error running phase N in <seq> sequence: task 1/1:
// failed, <why>"), journaled as "sequence-failed". It reports whether the
// sequence goes on.
func (n *Node) drainPhase(actorID, seq string, phase int) bool {
	n.c.mu.Lock()
	boot, name, kube := n.bootID, n.hostnameLocked(), n.c.opts.kube != nil
	if kube {
		n.eventLocked("drain", seq)
	}
	n.publishLocked(actorID, &machineapi.SequenceEvent{Sequence: seq, Action: machineapi.SequenceEvent_START})
	n.publishLocked(actorID, &machineapi.PhaseEvent{Phase: "drain", Action: machineapi.PhaseEvent_START})
	n.publishLocked(actorID, &machineapi.TaskEvent{Task: "cordonAndDrainNode", Action: machineapi.TaskEvent_START})
	n.c.mu.Unlock()
	err := n.cordonAndDrain(context.Background(), name, func(w string) {
		n.c.mu.Lock()
		defer n.c.mu.Unlock()
		n.eventLocked("drain-warning", w)
	})
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	if kube {
		detail := ""
		if err != nil {
			detail = err.Error()
		}
		n.eventLocked("drained", detail)
	}
	if n.bootID != boot || n.inc == nil {
		return false
	}
	n.publishLocked(actorID, &machineapi.TaskEvent{Task: "cordonAndDrainNode", Action: machineapi.TaskEvent_STOP})
	n.publishLocked(actorID, &machineapi.PhaseEvent{Phase: "drain", Action: machineapi.PhaseEvent_STOP})
	if err != nil {
		msg := fmt.Sprintf("error running phase %d in %s sequence: task 1/1: failed, %v", phase, seq, err)
		n.sequenceFailedLocked(actorID, seq, msg)
		n.eventLocked("sequence-failed", msg)
		return false
	}
	return true
}

// configuredLater boots the node again with the config just applied in
// maintenance mode (the maintenance service stops, machined goes on
// booting; on metal it installs and reboots first).
func (n *Node) configuredLater() {
	go func() {
		n.life.Lock()
		defer n.life.Unlock()
		n.halt("", "")
		_ = n.boot()
	}()
}

// validationMode is the runtime mode config validation runs under
// (machinery validation.RuntimeMode, as Talos' runtime.Mode implements it;
// machined's modeWrapper overrides RequiresInstall once installed,
// v1alpha1_server.go).
func (n *Node) validationMode(installed bool) validationMode {
	return validationMode{mode: n.opts.platform.Mode, installed: installed}
}

type validationMode struct {
	mode      string
	installed bool
}

func (m validationMode) String() string        { return m.mode }
func (m validationMode) RequiresInstall() bool { return m.mode == "metal" && !m.installed }
func (m validationMode) InContainer() bool     { return false }

// validConfig parses and validates a config as a booting node would.
func validConfig(raw []byte, mode validationMode) (*machineConfig, error) {
	mc, err := parseConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("parse config: %w", err)
	}
	if _, err := mc.cfg.Validate(mode); err != nil {
		return nil, fmt.Errorf("validate config: %w", err)
	}
	return mc, nil
}

// legacyFeature reads a machine.features switch of mc's v1alpha1 document
// (rbac, apidCheckExtKeyUsage): Talos v1.9 to v1.11 follow it; from v1.12
// both are always on and machinery no longer reads them (versions.go).
func legacyFeature(mc *machineConfig, field func(*v1alpha1.FeaturesConfig) *bool) bool {
	raw := mc.cfg.RawV1Alpha1()
	if raw == nil || raw.MachineConfig == nil || raw.MachineConfig.MachineFeatures == nil {
		return false
	}
	v := field(raw.MachineConfig.MachineFeatures)
	return v != nil && *v
}

// worker reports a worker config.
func isWorker(mc *machineConfig) bool {
	return mc != nil && mc.cfg.Machine().Type() == machine.TypeWorker
}
