// Package upgrade moves a running cluster, in place, to the Talos and
// Kubernetes versions its stack declares: one node at a time, control
// planes first, with a health gate before and after each node. It talks
// only to the Talos machine API (machinery's client) with the stack's
// talosconfig; it never touches Pulumi state, a VM or a disk.
//
// The sequence follows upstream's own upgrade orchestration, Talos'
// provision upgrade suite (talos v1.11.5
// internal/integration/provision/upgrade.go: every control plane, then
// every worker, each upgraded and waited for before the next) and
// `talosctl upgrade --wait` (cmd/talosctl/cmd/talos/upgrade.go: read the
// boot ID, call Upgrade, wait until the boot ID changes). Kubernetes is
// upgraded after every node runs the declared Talos, with upstream's own
// `talosctl upgrade-k8s` code (see kubernetes.go).
package upgrade

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"k8s.io/client-go/kubernetes"

	"github.com/milner/milner/components/vocab"
	"github.com/milner/milner/stacks/config"
)

// Node is one declared node as the upgrade reaches it.
type Node struct {
	// Name is the node's logical name (milner:nodes[].name), all of the
	// node its JSON shows (MarshalJSON).
	Name string
	// Role is controlplane or worker.
	Role vocab.Role
	// Endpoint is where the node's Talos API is dialled: its address (the
	// client adds Talos' apid port, 50000) or host:port.
	Endpoint string
}

// MarshalJSON is the node's name.
func (n Node) MarshalJSON() ([]byte, error) { return json.Marshal(n.Name) }

// UnmarshalJSON reads the name MarshalJSON writes (the role and endpoint
// are not in the JSON), so a Go client decodes a --json result whole.
func (n *Node) UnmarshalJSON(b []byte) error { return json.Unmarshal(b, &n.Name) }

// Declared is what the stack declares: the versions every node should run
// and the nodes, in config order.
type Declared struct {
	// TalosVersion is milner:cluster.talosVersion, e.g. v1.11.5.
	TalosVersion string `json:"talosVersion"`
	// KubernetesVersion is milner:cluster.kubernetesVersion, e.g. v1.34.1.
	KubernetesVersion string `json:"kubernetesVersion"`
	// InstallImage is milner:cluster.installImage (default
	// ghcr.io/siderolabs/installer:<talosVersion>): what Upgrade installs.
	InstallImage string `json:"-"`
	// KubernetesEndpoint is the cluster's Kubernetes API URL.
	KubernetesEndpoint string `json:"-"`
	// Nodes are milner:nodes, in config order.
	Nodes []Node `json:"-"`
}

// FromConfig returns what the typed stack config declares.
func FromConfig(cfg *config.Config) Declared {
	d := Declared{
		TalosVersion:       cfg.Cluster.TalosVersion,
		KubernetesVersion:  cfg.Cluster.KubernetesVersion,
		InstallImage:       cfg.Cluster.InstallImage,
		KubernetesEndpoint: cfg.Endpoint(),
	}
	for _, n := range cfg.Nodes {
		// The node's address: the client adds Talos' apid port.
		d.Nodes = append(d.Nodes, Node{Name: n.Name, Role: n.Role, Endpoint: n.Addr.String()})
	}
	return d
}

// controlPlanes returns the declared control planes, in config order.
func (d Declared) controlPlanes() []Node {
	return slices.DeleteFunc(slices.Clone(d.Nodes), func(n Node) bool { return n.Role != vocab.RoleControlPlane })
}

// upgradeOrder is the order nodes are upgraded in: every control plane,
// then every worker, each group in config order. Control planes go first
// as in upstream's provision upgrade suite, and because Kubernetes' skew
// policy lets a kubelet lag the API server but never lead it; etcd quorum
// is kept by upgrading one node at a time behind the health gate.
func (d Declared) upgradeOrder() []Node {
	workers := slices.DeleteFunc(slices.Clone(d.Nodes), func(n Node) bool { return n.Role == vocab.RoleControlPlane })
	return append(d.controlPlanes(), workers...)
}

// Cluster holds one Talos client per declared node, each dialled at that
// node's endpoint, so every call is answered by the node itself (no apid
// proxying through a node that may be rebooting).
type Cluster struct {
	declared Declared
	clients  map[string]*client.Client
	// kubernetes, when set (tests: export_test.go), is the Kubernetes API
	// instead of the one a control plane's admin kubeconfig reaches.
	kubernetes kubernetes.Interface
}

// Connect builds a client per declared node from the talosconfig cfg
// (the stack's own talosconfig output, or a file). It dials lazily:
// nothing is sent until a call.
func Connect(ctx context.Context, cfg *clientconfig.Config, d Declared) (*Cluster, error) {
	c := &Cluster{declared: d, clients: map[string]*client.Client{}}
	for _, n := range d.Nodes {
		cl, err := client.New(ctx, client.WithConfig(cfg), client.WithEndpoints(n.Endpoint))
		if err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("node %q: talos client: %w", n.Name, err)
		}
		c.clients[n.Name] = cl
	}
	return c, nil
}

// dial connects to the nodes of d with cfg for at most timeout and calls
// ask; why it could not connect is its error.
func dial(ctx context.Context, cfg *clientconfig.Config, d Declared, timeout time.Duration, ask func(context.Context, *Cluster)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := Connect(ctx, cfg, d)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	ask(ctx, c)
	return nil
}

// each calls f for every node at once and waits for them all: a dead node
// costs one timeout, not one per node.
func each(nodes []Node, f func(i int, n Node)) {
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { f(i, n) })
	}
	wg.Wait()
}

// Close closes every client.
func (c *Cluster) Close() error {
	var errs []error
	for _, cl := range c.clients {
		errs = append(errs, cl.Close())
	}
	return errors.Join(errs...)
}

// talosVersion asks a node which Talos version it runs.
func (c *Cluster) talosVersion(ctx context.Context, n Node) (string, error) {
	resp, err := c.clients[n.Name].Version(ctx)
	if err != nil {
		return "", err
	}
	if len(resp.GetMessages()) != 1 || resp.GetMessages()[0].GetVersion() == nil {
		return "", fmt.Errorf("version: want one answer, got %d", len(resp.GetMessages()))
	}
	return resp.GetMessages()[0].GetVersion().GetTag(), nil
}

// Step is one node's Talos OS upgrade.
type Step struct {
	// Node is the node.
	Node Node
	// From is the Talos version it runs.
	From string
	// To is the version this step installs.
	To string
}

// Plan is what a run will do, in order: the stages of the upgrade path
// (path.go).
type Plan struct {
	// Declared is what the stack declares.
	Declared Declared
	// Stages are the path's stages, in order.
	Stages []Stage
	// Current are the nodes already on the declared Talos version.
	Current []Node
}

// Empty reports a plan with nothing to do.
func (p *Plan) Empty() bool { return len(p.Stages) == 0 }

// Write prints the plan: each stage, the Kubernetes version each Talos
// stage runs with, and each node it moves.
func (p *Plan) Write(w io.Writer) {
	_, _ = fmt.Fprintf(w, "Talos %s (installer %s), Kubernetes %s\n", p.Declared.TalosVersion, p.Declared.InstallImage, p.Declared.KubernetesVersion)
	for _, n := range p.Current {
		_, _ = fmt.Fprintf(w, "  = %-12s already on Talos %s\n", n.Name, p.Declared.TalosVersion)
	}
	if p.Empty() {
		_, _ = fmt.Fprintln(w, "  nothing to upgrade: every node runs the declared versions")
		return
	}
	talos, kube := 0, 0
	for _, st := range p.Stages {
		if st.Kubernetes != nil {
			kube++
		} else {
			talos += len(st.Nodes)
		}
	}
	_, _ = fmt.Fprintf(w, "  the path (%s): %d stages, %d node upgrades (each one reboot, health-gated), %d Kubernetes upgrades\n", config.SupportedVersionsFile, len(p.Stages), talos, kube)
	kubeRuns := p.kubernetesBefore()
	for i, st := range p.Stages {
		if k := st.Kubernetes; k != nil {
			_, _ = fmt.Fprintf(w, "  %d. Kubernetes %s -> %s (upgrade-k8s: control-plane components node by node, kube-proxy, kubelets, bootstrap manifests)\n", i+1, k.From, k.To)
			continue
		}
		row, _ := config.TalosRow(st.Talos)
		lo, hi := row.KubernetesRange()
		_, _ = fmt.Fprintf(w, "  %d. Talos %s with %s, Kubernetes %s (Talos %s takes %s to %s)\n", i+1, st.Talos, st.Image, kubeRuns[i], row.Minor, lo, hi)
		for _, s := range st.Nodes {
			_, _ = fmt.Fprintf(w, "       %-12s %s %s -> %s (upgrade, preserve data, reboot, then health gate)\n", s.Node.Name, s.Node.Role, s.From, s.To)
		}
	}
}

// kubernetesBefore is, per stage, the Kubernetes version the cluster runs
// when the stage starts.
func (p *Plan) kubernetesBefore() []string {
	out := make([]string, len(p.Stages))
	kube := ""
	for _, st := range p.Stages {
		if st.Kubernetes != nil {
			kube = st.Kubernetes.From
			break
		}
	}
	if kube == "" {
		kube = p.Declared.KubernetesVersion
	}
	for i, st := range p.Stages {
		out[i] = kube
		if st.Kubernetes != nil {
			kube = st.Kubernetes.To
		}
	}
	return out
}

// MakePlan asks every node what it runs and plans the upgrade path. It
// refuses, listing every problem, when a node cannot be asked or no path
// reaches the declared versions.
func MakePlan(ctx context.Context, c *Cluster) (*Plan, error) {
	inv := Inventory(ctx, c)
	d := c.declared
	plan := &Plan{Declared: d}
	var problems []string
	for _, r := range inv {
		if r.Err != "" {
			problems = append(problems, fmt.Sprintf("node %q: %v", r.Node.Name, r.Err))
		}
	}
	if len(problems) == 0 {
		plan.Stages, problems = planPath(d, inv)
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("cannot plan the upgrade (%d problems); nothing was changed:\n  - %s", len(problems), strings.Join(problems, "\n  - "))
	}
	for _, r := range inv {
		if r.Talos == d.TalosVersion {
			plan.Current = append(plan.Current, r.Node)
		}
	}
	return plan, nil
}

// Options tunes a run.
type Options struct {
	// Out receives progress lines.
	Out io.Writer
	// Poll is the interval between checks while waiting.
	Poll time.Duration
	// RebootTimeout bounds the wait for a node to reboot into the new version.
	RebootTimeout time.Duration
	// HealthTimeout bounds the wait for the cluster to be healthy after a node.
	HealthTimeout time.Duration
	// Apps is the apps gate: checked (Apps.Ready) before the first node
	// and waited for (Apps.Wait), up to AppsTimeout, after every node and
	// after Kubernetes. nil when the stack has no apps layer.
	Apps *Apps
	// AppsTimeout bounds the wait for the apps to be Ready after a node.
	AppsTimeout time.Duration
	// DrainTimeout bounds the drain of a node upgraded through
	// LifecycleService (lifecycle.go); zero: talosctl's 5 minutes.
	DrainTimeout time.Duration
}

// DefaultOptions are the timeouts of a real cluster: an upgrade pulls the
// installer, writes the new image and reboots (upstream's suite allows 5
// minutes to the reboot and 10 more to the new version).
func DefaultOptions(out io.Writer) Options {
	return Options{Out: out, Poll: 5 * time.Second, RebootTimeout: 15 * time.Minute, HealthTimeout: 10 * time.Minute, AppsTimeout: 10 * time.Minute}
}

// StopError is the error of a run that stopped: which node, at which
// stage, why, and what was and was not touched.
type StopError struct {
	// Node is the node the run stopped at ("" for the Kubernetes step).
	Node string
	// Stage is what was being done: "health gate before", "apps before",
	// "upgrade", "reboot", "version", "health gate after", "apps after",
	// "kubernetes".
	Stage string
	// Upgraded are the nodes this run upgraded before stopping.
	Upgraded []string
	// Untouched are the planned nodes this run did not touch.
	Untouched []string
	// Err is the reason.
	Err error
}

func (e *StopError) Error() string {
	where := fmt.Sprintf("node %q", e.Node)
	if e.Node == "" {
		where = "Kubernetes"
	}
	msg := fmt.Sprintf("upgrade stopped at %s (%s): %v", where, e.Stage, e.Err)
	if len(e.Upgraded) > 0 {
		msg += fmt.Sprintf("; upgraded by this run: %s", strings.Join(e.Upgraded, ", "))
	}
	if len(e.Untouched) > 0 {
		msg += fmt.Sprintf("; untouched: %s", strings.Join(e.Untouched, ", "))
	}
	return msg + "; fix the cause and rerun `milner upgrade`: nodes already on the declared version are skipped"
}

func (e *StopError) Unwrap() error { return e.Err }

// NothingChanged reports a run that stopped at a gate before it upgraded
// any node: a refusal.
func (e *StopError) NothingChanged() bool {
	return len(e.Upgraded) == 0 && (e.Stage == "health gate before" || e.Stage == "apps before")
}

// Run carries out a plan, stage by stage: for each node of a Talos stage
// the health gate, the upgrade (upgradeNode), the wait for the reboot
// into the stage's version, the health gate again; a Kubernetes stage
// between the same gates. The first failure stops the run; nothing after
// it is touched.
func Run(ctx context.Context, c *Cluster, plan *Plan, o Options) error {
	var upgraded []string
	type unit struct {
		stage int
		step  *Step // nil: the stage's Kubernetes upgrade
	}
	var units []unit
	for i := range plan.Stages {
		if plan.Stages[i].Kubernetes != nil {
			units = append(units, unit{stage: i})
		}
		for j := range plan.Stages[i].Nodes {
			units = append(units, unit{stage: i, step: &plan.Stages[i].Nodes[j]})
		}
	}
	stop := func(u int, stage string, err error) error {
		e := &StopError{Stage: stage, Upgraded: upgraded, Err: err}
		if s := units[u].step; s != nil {
			e.Node = s.Node.Name
		}
		if stage == "health gate before" || stage == "apps before" {
			e.Untouched = untouched(units[u].step)
		}
		for _, v := range units[u+1:] {
			e.Untouched = append(e.Untouched, untouched(v.step)...)
		}
		e.Untouched = slices.Compact(e.Untouched)
		return e
	}
	for u, un := range units {
		st := plan.Stages[un.stage]
		var what string
		if un.step != nil {
			what = fmt.Sprintf("[%d/%d] %s -> Talos %s", un.stage+1, len(plan.Stages), un.step.Node.Name, un.step.To)
		} else {
			what = fmt.Sprintf("[%d/%d] Kubernetes %s -> %s", un.stage+1, len(plan.Stages), st.Kubernetes.From, st.Kubernetes.To)
		}
		_, _ = fmt.Fprintf(o.Out, "%s: health gate\n", what)
		if err := c.Healthy(ctx); err != nil {
			return stop(u, "health gate before", err)
		}
		if err := o.Apps.Ready(ctx); err != nil {
			return stop(u, "apps before", err)
		}
		var stage string
		var err error
		if un.step != nil {
			stage, err = c.upgradeNode(ctx, *un.step, st.Image, o, what, &upgraded)
		} else {
			stage, err = "kubernetes", UpgradeKubernetes(ctx, c, *st.Kubernetes, o.Out)
		}
		if err != nil {
			return stop(u, stage, err)
		}
		_, _ = fmt.Fprintf(o.Out, "%s: waiting for the cluster to be healthy\n", what)
		if err := waitFor(ctx, o, o.HealthTimeout, func() error { return c.Healthy(ctx) }); err != nil {
			return stop(u, "health gate after", err)
		}
		_, _ = fmt.Fprintf(o.Out, "%s: healthy; waiting for the apps to be Ready\n", what)
		if err := o.Apps.Wait(ctx, o); err != nil {
			return stop(u, "apps after", err)
		}
	}
	return nil
}

// untouched names a step's node (none for a Kubernetes stage).
func untouched(s *Step) []string {
	if s == nil {
		return nil
	}
	return []string{s.Node.Name}
}

// upgradeNode upgrades one node and waits for it to run the step's
// version; the stage names what failed. The node counts as upgraded once
// it took the upgrade. A node on Talos v1.13 or later is upgraded as
// talosctl v1.13 does (lifecycle.go): drained by Milner, uncordoned once
// back; an older one through MachineService.Upgrade, which drains and
// uncordons it itself.
func (c *Cluster) upgradeNode(ctx context.Context, s Step, image string, o Options, what string, upgraded *[]string) (string, error) {
	boot, err := c.bootID(ctx, s.Node)
	if err != nil {
		return "health gate before", fmt.Errorf("read boot id: %w", err)
	}
	_, _ = fmt.Fprintf(o.Out, "%s: upgrade %s -> %s with %s (preserve=true)\n", what, s.From, s.To, image)
	if lifecycleAPI(s.From) {
		if stage, err := c.upgradeLifecycle(ctx, s.Node, image, o, what); err != nil {
			return stage, err
		}
		*upgraded = append(*upgraded, s.Node.Name)
		if err := c.waitReboot(ctx, s.Node, boot, o); err != nil {
			return "reboot", err
		}
	} else {
		if err := c.budgetCheck(ctx, s, what, o); err != nil {
			return "drain check", err
		}
		actor, err := c.upgrade(ctx, s.Node, image)
		if err != nil {
			return "upgrade", err
		}
		// The sequence runs after the call answered; a phase that fails
		// (the drain first) is told only in the node's events, and the
		// wait for the reboot stops there (sequence.go).
		seq := c.watchSequence(ctx, s.Node, actor, o, what)
		err = c.waitReboot(seq.ctx, s.Node, boot, o)
		seq.close()
		if serr := seq.failed(); serr != nil {
			return "upgrade", serr // not rebooted: not upgraded by this run
		}
		*upgraded = append(*upgraded, s.Node.Name)
		if err != nil {
			return "reboot", err
		}
	}
	switch v, err := c.talosVersion(ctx, s.Node); {
	case err != nil:
		return "version", err
	case v != s.To:
		return "version", fmt.Errorf("came back on Talos %s, want %s (Talos boots the previous image when the new one fails; check the installer image %s)", v, s.To, image)
	}
	if lifecycleAPI(s.From) {
		if err := c.uncordon(ctx, s.Node, o, what); err != nil {
			return "uncordon", err
		}
	}
	_, _ = fmt.Fprintf(o.Out, "%s: runs %s\n", what, s.To)
	return "", nil
}

// upgrade asks a node to install image and reboot into it. preserve=true
// keeps the EPHEMERAL partition (upstream: without it an upgrade wipes it
// and a control plane leaves etcd); stage=false installs now; force=false
// keeps machined's own etcd checks before a control plane goes down.
//
// It returns the actor ID the node runs the upgrade sequence under.
func (c *Cluster) upgrade(ctx context.Context, n Node, image string) (string, error) {
	// Deprecated upstream for LifecycleService, which nodes below v1.13 lack;
	// talosctl v1.13.9 falls back to this call for them too (cmd/talosctl/cmd/talos/upgrade.go).
	resp, err := c.clients[n.Name].UpgradeWithOptions(ctx, //nolint:staticcheck // see above
		client.WithUpgradeImage(image),
		client.WithUpgradePreserve(true),
		client.WithUpgradeStage(false),
		client.WithUpgradeForce(false),
		client.WithUpgradeRebootMode(machine.UpgradeRequest_DEFAULT),
	)
	if err != nil {
		return "", err
	}
	if len(resp.GetMessages()) != 1 {
		return "", fmt.Errorf("upgrade: want one answer, got %d", len(resp.GetMessages()))
	}
	return resp.GetMessages()[0].GetActorId(), nil
}

// bootIDPath is the file whose content changes on every boot; talosctl
// upgrade --wait reads it before and after (talosctl's action tracker).
const bootIDPath = "/proc/sys/kernel/random/boot_id"

// bootID reads a node's boot ID.
func (c *Cluster) bootID(ctx context.Context, n Node) (string, error) {
	r, err := c.clients[n.Name].Read(ctx, bootIDPath)
	if err != nil {
		return "", err
	}
	defer func() { _ = r.Close() }()
	b, err := io.ReadAll(r)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// waitReboot waits until the node answers with a boot ID other than before.
// Errors while it reboots are expected and retried.
func (c *Cluster) waitReboot(ctx context.Context, n Node, before string, o Options) error {
	return waitFor(ctx, o, o.RebootTimeout, func() error {
		id, err := c.bootID(ctx, n)
		switch {
		case err != nil:
			return err
		case id == before:
			return errors.New("has not rebooted yet")
		}
		return nil
	})
}

// waitFor calls check every o.Poll until it succeeds or timeout passes,
// and returns the last error.
func waitFor(ctx context.Context, o Options, timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still failing after %s: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(o.Poll):
		}
	}
}

// Execute is `milner upgrade`: it plans, prints the plan, and stops there
// on a dry run (nothing but reads was sent) or when confirm refuses;
// otherwise it runs the plan.
func Execute(ctx context.Context, c *Cluster, o Options, dryRun bool, confirm func(*Plan) bool) error {
	plan, err := MakePlan(ctx, c)
	if err != nil {
		return err
	}
	plan.Write(o.Out)
	switch {
	case plan.Empty():
		return nil
	case dryRun:
		_, _ = fmt.Fprintln(o.Out, "dry run: nothing was changed")
		return nil
	case !confirm(plan):
		return errors.New("refused: not confirmed; nothing was changed")
	}
	return Run(ctx, c, plan, o)
}
