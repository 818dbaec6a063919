package conformance

import (
	"fmt"
	"slices"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"golang.org/x/mod/semver"

	"github.com/milner/milner/components/talosnode"
	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/offline"
	"github.com/milner/milner/stacks"
	"github.com/milner/milner/stacks/config"
)

// Rule is one layer rule of the seeds, checked on a stack's evidence.
type Rule struct {
	// Name says what holds when the rule passes.
	Name string
	// Layer is the layer the rule is about; it applies only to stacks that declare it.
	Layer config.Layer
	// Check returns every violation; none means the rule holds.
	Check func(ev *Evidence) []string
}

// Rules are the layer rules, in the order a figure reports them.
var Rules = []Rule{
	{"persistent substrate is protected", config.LayerSubstrate, persistentProtected},
	{"replace-on-change and delete-before-replace on every node VM, and only there", config.LayerSubstrate, replaceOnlyNodeVMs},
	{"node disks are separate resources attached to the replaceable VM", config.LayerSubstrate, dataOutsideVM},
	{"a Talos version bump changes no substrate input", config.LayerSubstrate, versionBumpSafe},
	{"every substrate, node and app resource has a parent component", config.LayerSubstrate, parented},
	{"Talos config is applied staged_if_needing_reboot", config.LayerTalos, applyModeStaged},
	{"destroying a Talos config never resets the node", config.LayerTalos, noReset},
	{"exactly one bootstrap, named after the cluster", config.LayerTalos, oneBootstrap},
	{"every node config passes Talos' own validator (machinery v1.11.5) for the stack's platform", config.LayerTalos, talosValid},
	{"cluster secrets are protected and secret", config.LayerTalos, secretsProtected},
	{"releases have a fixed name and are atomic", config.LayerApps, releasesNamedAtomic},
	{"chart versions are pinned", config.LayerApps, chartsPinned},
}

// bootMediaTypes may be retained on delete instead of protected: one image
// per Talos version, so a version bump drops the old one from the program
// (Protect would fail that update; RetainOnDelete keeps the file).
var bootMediaTypes = []string{gate.TypeProxmoxImage, gate.TypeProxmoxFile}

func layer(r offline.Registration) gate.Layer { return gate.LayerOf(r.Type, r.Name) }

func inLayer(regs []offline.Registration, l gate.Layer) []offline.Registration {
	var out []offline.Registration
	for _, r := range regs {
		if r.Custom && layer(r) == l {
			out = append(out, r)
		}
	}
	return out
}

func ofType(regs []offline.Registration, typ string) []offline.Registration {
	var out []offline.Registration
	for _, r := range regs {
		if r.Type == typ {
			out = append(out, r)
		}
	}
	return out
}

// find returns the registration a URN names (the mock's URNs and the SDK's
// differ in form; type and name identify a resource).
func find(regs []offline.Registration, urn string) (offline.Registration, bool) {
	u := resource.URN(urn)
	if !u.IsValid() {
		return offline.Registration{}, false
	}
	for _, r := range regs {
		if r.Type == string(u.Type()) && r.Name == u.Name() {
			return r, true
		}
	}
	return offline.Registration{}, false
}

func byName(regs []offline.Registration, name string) (offline.Registration, bool) {
	for _, r := range regs {
		if r.Name == name && r.Custom {
			return r, true
		}
	}
	return offline.Registration{}, false
}

// plain unwraps a secret property value.
func plain(v resource.PropertyValue) resource.PropertyValue {
	for v.IsSecret() {
		v = v.SecretValue().Element
	}
	return v
}

func stringInput(r offline.Registration, key resource.PropertyKey) (string, bool) {
	v := plain(r.Inputs[key])
	if !v.IsString() {
		return "", false
	}
	return v.StringValue(), true
}

func boolInput(r offline.Registration, path string) (bool, bool) {
	p, err := resource.ParsePropertyPath(path)
	if err != nil {
		return false, false
	}
	v, ok := p.Get(resource.NewObjectProperty(r.Inputs))
	if v = plain(v); !ok || !v.IsBool() {
		return false, false
	}
	return v.BoolValue(), true
}

func persistentProtected(ev *Evidence) []string {
	var out []string
	regs := inLayer(ev.Regs, gate.Persistent)
	if len(regs) == 0 {
		out = append(out, "the stack declares no persistent substrate")
	}
	for _, r := range regs {
		switch {
		case r.Options.Protect:
		case slices.Contains(bootMediaTypes, r.Type) && r.Options.RetainOnDelete:
		default:
			out = append(out, fmt.Sprintf("%s (%s) is not protected", r.Name, r.Type))
		}
	}
	return out
}

func replaceOnlyNodeVMs(ev *Evidence) []string {
	var out []string
	vms := 0
	for _, r := range ev.Regs {
		if !r.Custom {
			continue
		}
		replaces := len(r.Options.ReplaceOnChanges) > 0
		dbr := r.Options.DeleteBeforeReplace
		if layer(r) == gate.Disposable {
			vms++
			if !replaces || !dbr {
				out = append(out, fmt.Sprintf("node VM %s lacks replaceOnChanges (%v) or deleteBeforeReplace (%v)", r.Name, r.Options.ReplaceOnChanges, dbr))
			}
			continue
		}
		if replaces || dbr {
			out = append(out, fmt.Sprintf("%s (%s) is not a node VM but sets replaceOnChanges %v / deleteBeforeReplace %v", r.Name, r.Type, r.Options.ReplaceOnChanges, dbr))
		}
	}
	if vms != len(ev.Config.Nodes) {
		out = append(out, fmt.Sprintf("%d node VMs for %d nodes", vms, len(ev.Config.Nodes)))
	}
	return out
}

// diskResource is the suffix of the logical name of the resource that owns a
// node's data disk, "<cluster>-<node><suffix>", per substrate kind.
var diskResource = map[config.Kind]string{
	config.KindLibvirt: config.DataSuffix,   // the data volume (the OS volume is "-os")
	config.KindProxmox: config.HolderSuffix, // the holder VM owning OS and data disks
}

// dataOutsideVM checks that every node's data disk lives in its own
// persistent resource (a libvirt volume, a Proxmox holder VM) that the node
// VM depends on: it outlives a replace of the VM. (That it is protected is
// persistentProtected's business.)
func dataOutsideVM(ev *Evidence) []string {
	suffix, ok := diskResource[ev.Config.Substrate.Kind]
	if !ok {
		return []string{fmt.Sprintf("no disk rule for substrate kind %q", ev.Config.Substrate.Kind)}
	}
	var out []string
	for _, n := range ev.Config.Nodes {
		vmName := ev.Config.Cluster.Name + "-" + n.Name
		vm, ok := byName(ev.Regs, vmName)
		if !ok || layer(vm) != gate.Disposable {
			out = append(out, fmt.Sprintf("node %s: no node VM %s", n.Name, vmName))
			continue
		}
		data, ok := byName(ev.Regs, vmName+suffix)
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("node %s: no disk resource %s%s", n.Name, vmName, suffix))
		case layer(data) != gate.Persistent:
			out = append(out, fmt.Sprintf("node %s: data disk %s (%s) is not persistent substrate", n.Name, data.Name, data.Type))
		case !slices.ContainsFunc(vm.Options.Dependencies, func(urn string) bool {
			d, ok := find(ev.Regs, urn)
			return ok && d.Name == data.Name && d.Type == data.Type
		}):
			out = append(out, fmt.Sprintf("node %s: VM %s does not attach %s", n.Name, vm.Name, data.Name))
		}
	}
	return out
}

// versionBumpSafe compares the substrate of the run with that of the run
// with a bumped Talos version: no input may change except under the
// resource's ignoreChanges, and no resource may leave the program unless it
// is retained on delete (an old boot image).
func versionBumpSafe(ev *Evidence) []string {
	var out []string
	for _, r := range ev.Regs {
		if !r.Custom || (layer(r) != gate.Persistent && layer(r) != gate.Disposable) {
			continue
		}
		b, ok := byTypeName(ev.Bumped, r.Type, r.Name)
		if !ok {
			if !r.Options.RetainOnDelete {
				out = append(out, fmt.Sprintf("%s leaves the program (a delete) when Talos becomes %s", r.Name, ev.BumpedVersion))
			}
			continue
		}
		if changed := changedInputs(r, b); len(changed) > 0 {
			out = append(out, fmt.Sprintf("%s: Talos %s changes %s", r.Name, ev.BumpedVersion, strings.Join(changed, ", ")))
		}
	}
	if ev.Config.StopAfter.Includes(config.LayerTalos) {
		// The bump keeps the config contract (it is fixed for the cluster's
		// life) and reaches the nodes' install image, unless one is pinned.
		cl := ev.Config.Cluster
		pinned := cl.InstallImage != config.DefaultInstallImage(cl.TalosVersion)
		for _, inv := range ev.BumpedInvokes {
			if inv.Token != TokenGetConfiguration {
				continue
			}
			if v := str(inv.Args["talosVersion"]); v != ev.Config.Cluster.ConfigContract {
				out = append(out, fmt.Sprintf("a machine configuration of the bumped run has contract %q, want the fixed %s", v, ev.Config.Cluster.ConfigContract))
			}
			if patches := strings.Join(strs(inv.Args["configPatches"]), "\n"); !pinned && !strings.Contains(patches, ":"+ev.BumpedVersion) {
				out = append(out, fmt.Sprintf("a machine configuration of the bumped run does not install Talos %s", ev.BumpedVersion))
			}
		}
	}
	return out
}

func byTypeName(regs []offline.Registration, typ, name string) (offline.Registration, bool) {
	for _, r := range regs {
		if r.Type == typ && r.Name == name {
			return r, true
		}
	}
	return offline.Registration{}, false
}

// changedInputs lists the top-level inputs that differ between two
// registrations of one resource once its ignoreChanges paths are removed.
func changedInputs(a, b offline.Registration) []string {
	strip := func(m resource.PropertyMap) resource.PropertyMap {
		c := resource.NewPropertyMapFromMap(m.Mappable()) // a deep copy
		for _, p := range a.Options.IgnoreChanges {
			if path, err := resource.ParsePropertyPath(p); err == nil {
				path.Delete(resource.NewObjectProperty(c))
			}
		}
		return c
	}
	x, y := strip(a.Inputs), strip(b.Inputs)
	var changed []string
	for _, k := range unionKeys(x, y) {
		if !x[k].DeepEquals(y[k]) {
			changed = append(changed, string(k))
		}
	}
	return changed
}

func unionKeys(a, b resource.PropertyMap) []resource.PropertyKey {
	keys := a.StableKeys()
	for _, k := range b.StableKeys() {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// parented checks that every resource of the substrate, of a node and of an
// app is a child of a component of this run. Cluster-level resources (the
// secrets bundle, the kubeconfig, the Kubernetes provider) sit at the stack
// on purpose: stacks/program.go lists them.
func parented(ev *Evidence) []string {
	var out []string
	for _, r := range ev.Regs {
		if !r.Custom || !needsParent(r) {
			continue
		}
		p, ok := find(ev.Regs, r.Parent)
		if !ok || p.Custom {
			out = append(out, fmt.Sprintf("%s (%s) has no parent component (parent %q)", r.Name, r.Type, r.Parent))
		}
	}
	return out
}

func needsParent(r offline.Registration) bool {
	switch layer(r) {
	case gate.Persistent, gate.Disposable:
		return true
	}
	// The bootstrap, like the secrets and the kubeconfig, is cluster-level:
	// it belongs to no node.
	return r.Type == gate.TypeConfigApply || r.Type == gate.TypeHelmRelease
}

func applyModeStaged(ev *Evidence) []string {
	var out []string
	applies := ofType(ev.Regs, gate.TypeConfigApply)
	if len(applies) != len(ev.Config.Nodes) {
		out = append(out, fmt.Sprintf("%d configuration applies for %d nodes", len(applies), len(ev.Config.Nodes)))
	}
	for _, r := range applies {
		if mode, _ := stringInput(r, "applyMode"); mode != talosnode.ApplyMode {
			out = append(out, fmt.Sprintf("%s applies with mode %q, want %s", r.Name, mode, talosnode.ApplyMode))
		}
	}
	return out
}

func noReset(ev *Evidence) []string {
	var out []string
	applies := ofType(ev.Regs, gate.TypeConfigApply)
	if len(applies) == 0 {
		out = append(out, "no configuration apply")
	}
	for _, r := range applies {
		if reset, ok := boolInput(r, "onDestroy.reset"); !ok || reset {
			out = append(out, fmt.Sprintf("%s: onDestroy.reset is not set to false (the provider's default resets the node)", r.Name))
		}
	}
	return out
}

func oneBootstrap(ev *Evidence) []string {
	want := ev.Config.Cluster.Name + "-bootstrap"
	bs := ofType(ev.Regs, gate.TypeTalosBootstrap)
	switch {
	case len(bs) != 1:
		return []string{fmt.Sprintf("%d bootstraps, want exactly 1", len(bs))}
	case bs[0].Name != want:
		return []string{fmt.Sprintf("bootstrap %s is not the cluster-level %s (a per-node name is re-planned when nodes change)", bs[0].Name, want)}
	}
	return nil
}

func secretsProtected(ev *Evidence) []string {
	ss := ofType(ev.Regs, gate.TypeTalosSecrets)
	if len(ss) != 1 {
		return []string{fmt.Sprintf("%d secrets bundles, want exactly 1", len(ss))}
	}
	var out []string
	s := ss[0]
	if !s.Options.Protect {
		out = append(out, s.Name+" is not protected")
	}
	for _, o := range stacks.SecretOutputs {
		if !slices.Contains(s.Options.AdditionalSecretOutputs, o) {
			out = append(out, fmt.Sprintf("%s does not mark output %s secret", s.Name, o))
		}
	}
	return out
}

func releasesNamedAtomic(ev *Evidence) []string {
	var out []string
	rs := ofType(ev.Regs, gate.TypeHelmRelease)
	want := len(ev.Config.Apps)
	if ev.Config.Storage.On() {
		want++ // the storage layer's provisioner
	}
	if len(rs) != want {
		out = append(out, fmt.Sprintf("%d releases for %d apps and the storage layer", len(rs), want))
	}
	for _, r := range rs {
		if name, _ := stringInput(r, "name"); name == "" {
			out = append(out, r.Name+" has no fixed release name (Helm would generate one per install)")
		}
		// milner:waitForApps false (test-only) skips waiting, which Helm's
		// atomic implies, so such a stack's releases cannot be atomic.
		if atomic, ok := boolInput(r, "atomic"); !ok || atomic != ev.Config.WaitForApps {
			out = append(out, fmt.Sprintf("%s is not atomic as waitForApps says (atomic %v, want %v: a failed upgrade must roll back unless waitForApps is false)", r.Name, atomic, ev.Config.WaitForApps))
		}
	}
	return out
}

func chartsPinned(ev *Evidence) []string {
	var out []string
	for _, r := range ofType(ev.Regs, gate.TypeHelmRelease) {
		v, versioned := stringInput(r, "version")
		chart, _ := stringInput(r, "chart")
		if !versioned && !r.Inputs.HasValue("repositoryOpts") && !strings.HasPrefix(chart, "oci://") {
			continue // a local chart (chart.path): the repository's commit pins it
		}
		if !strings.HasPrefix(v, "v") {
			v = "v" + v
		}
		if !semver.IsValid(v) || semver.Canonical(v) != v {
			out = append(out, fmt.Sprintf("%s: chart version %q is not pinned to an exact version", r.Name, strings.TrimPrefix(v, "v")))
		}
	}
	return out
}
