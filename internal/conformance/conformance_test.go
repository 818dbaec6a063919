package conformance

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"

	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/offline"
	"github.com/milner/milner/internal/stackfile"
)

const root = "../.."

// tools holds the Talos config validators (scripts/tools.sh talos-validate).
var tools = filepath.Join(root, ".tools", "bin")

var (
	devOnce sync.Once
	devEv   *Evidence
	devErr  error
)

// dev returns a private copy of the committed dev stack's evidence.
func dev(t *testing.T) *Evidence {
	t.Helper()
	devOnce.Do(func() {
		s, err := stackfile.Read(filepath.Join(root, "Pulumi.dev.yaml"), nil)
		if err != nil {
			devErr = err
			return
		}
		if devEv, devErr = Collect(s); devEv != nil {
			devEv.Tools = tools
		}
	})
	if devErr != nil {
		t.Fatal(devErr)
	}
	ev := *devEv
	ev.Declared.Regs = slices.Clone(devEv.Declared.Regs)
	ev.Bumped.Regs = slices.Clone(devEv.Bumped.Regs)
	ev.Declared.Invokes = slices.Clone(devEv.Declared.Invokes)
	ev.Bumped.Invokes = slices.Clone(devEv.Bumped.Invokes)
	return &ev
}

// edit applies f to a copy of the registration of that name in regs.
func edit(t *testing.T, regs []offline.Registration, name string, f func(r *offline.Registration)) {
	t.Helper()
	for i := range regs {
		if regs[i].Name == name && regs[i].Custom {
			r := regs[i]
			r.Inputs = maps.Clone(r.Inputs)
			r.Options.ReplaceOnChanges = slices.Clone(r.Options.ReplaceOnChanges)
			r.Options.IgnoreChanges = slices.Clone(r.Options.IgnoreChanges)
			r.Options.AdditionalSecretOutputs = slices.Clone(r.Options.AdditionalSecretOutputs)
			f(&r)
			regs[i] = r
			return
		}
	}
	t.Fatalf("no registration %s", name)
}

func drop(regs []offline.Registration, name string) []offline.Registration {
	return slices.DeleteFunc(regs, func(r offline.Registration) bool { return r.Name == name })
}

func TestEveryRuleHoldsOnDev(t *testing.T) {
	fig := Evaluate("dev", dev(t))
	for _, r := range fig.Results {
		if !r.Applies || len(r.Problems) > 0 {
			t.Errorf("%s: applies %v, problems %q", r.Rule, r.Applies, r.Problems)
		}
	}
	if p, a := fig.Score(); p != len(Rules) || a != len(Rules) {
		t.Errorf("dev scores %d/%d, want %d/%d", p, a, len(Rules), len(Rules))
	}
}

// failureCase doctors the dev evidence so that exactly one rule breaks.
type failureCase struct {
	rule   string
	doctor func(t *testing.T, ev *Evidence)
	// want is a problem the rule must say; {bumped} stands for the
	// bumped run's Talos version (the stack's, next patch).
	want string
}

// failureCases holds one case per way a rule can break.
var failureCases = []failureCase{
	{"exactly one cluster secrets bundle", func(t *testing.T, ev *Evidence) {
		b, _ := byName(ev.Declared.Regs, "milner-dev-secrets")
		b.Name = "milner-dev-secrets-2"
		ev.Declared.Regs = append(ev.Declared.Regs, b)
	}, "2 secrets bundles, want exactly 1"},
	{"every resource passes Milner's policy pack (internal/policypack): protection, secret outputs, pinned charts, apply mode, no reset", func(t *testing.T, ev *Evidence) {
		edit(t, ev.Declared.Regs, "milner-dev-cp-1-data", func(r *offline.Registration) { r.Options.Protect = false })
	}, "milner-protected: milner-dev-cp-1-data (libvirt:index/volume:Volume) is not protected"},
	{"replace-on-change and delete-before-replace on every node VM, and only there", func(t *testing.T, ev *Evidence) {
		edit(t, ev.Declared.Regs, "milner-dev-cp-2", func(r *offline.Registration) { r.Options.DeleteBeforeReplace = false })
	}, "node VM milner-dev-cp-2 lacks"},
	{"replace-on-change and delete-before-replace on every node VM, and only there", func(t *testing.T, ev *Evidence) {
		edit(t, ev.Declared.Regs, "milner-dev-pool", func(r *offline.Registration) { r.Options.ReplaceOnChanges = []string{"*"} })
	}, "milner-dev-pool (libvirt:index/pool:Pool) is not a node VM"},
	{"node disks are separate resources attached to the replaceable VM", func(t *testing.T, ev *Evidence) {
		ev.Declared.Regs = drop(ev.Declared.Regs, "milner-dev-cp-3-data")
	}, "node cp-3: no disk resource milner-dev-cp-3-data"},
	{"node disks are separate resources attached to the replaceable VM", func(t *testing.T, ev *Evidence) {
		edit(t, ev.Declared.Regs, "milner-dev-cp-1", func(r *offline.Registration) { r.Options.Dependencies = nil })
	}, "VM milner-dev-cp-1 does not attach milner-dev-cp-1-data"},
	{"a Talos version bump changes no substrate input", func(t *testing.T, ev *Evidence) {
		edit(t, ev.Bumped.Regs, "milner-dev-cp-1", func(r *offline.Registration) { r.Inputs["memory"] = resource.NewProperty(8192.0) })
	}, "milner-dev-cp-1: Talos {bumped} changes memory"},
	{"a Talos version bump changes no substrate input", func(t *testing.T, ev *Evidence) {
		// Without its ignoreChanges, the boot volume's source (the
		// image of the Talos version) would change on a bump.
		edit(t, ev.Declared.Regs, "milner-dev-boot", func(r *offline.Registration) { r.Options.IgnoreChanges = nil })
	}, "milner-dev-boot: Talos {bumped} changes source"},
	{"a Talos version bump changes no substrate input", func(t *testing.T, ev *Evidence) {
		ev.Bumped.Regs = drop(ev.Bumped.Regs, "milner-dev-net")
	}, "milner-dev-net leaves the program"},
	{"every substrate, node and app resource has a parent component", func(t *testing.T, ev *Evidence) {
		edit(t, ev.Declared.Regs, "cp-2-apply", func(r *offline.Registration) { r.Parent = "" })
	}, "cp-2-apply (talos:machine/configurationApply:ConfigurationApply) has no parent component"},
	{"Talos config is applied staged_if_needing_reboot", func(t *testing.T, ev *Evidence) {
		edit(t, ev.Declared.Regs, "cp-1-apply", func(r *offline.Registration) { r.Inputs["applyMode"] = resource.NewProperty("staged") })
	}, `cp-1-apply applies with mode "staged"`},
	{"every resource passes Milner's policy pack (internal/policypack): protection, secret outputs, pinned charts, apply mode, no reset", func(t *testing.T, ev *Evidence) {
		edit(t, ev.Declared.Regs, "cp-3-apply", func(r *offline.Registration) {
			r.Inputs["onDestroy"] = resource.NewProperty(resource.PropertyMap{"reset": resource.NewProperty(true)})
		})
	}, "milner-no-reset: cp-3-apply: onDestroy.reset is not set to false"},
	{"every resource passes Milner's policy pack (internal/policypack): protection, secret outputs, pinned charts, apply mode, no reset", func(t *testing.T, ev *Evidence) {
		edit(t, ev.Declared.Regs, "cp-3-apply", func(r *offline.Registration) { delete(r.Inputs, "onDestroy") })
	}, "milner-no-reset: cp-3-apply: onDestroy.reset is not set to false"},
	{"exactly one bootstrap, named after the cluster (none if adopted)", func(t *testing.T, ev *Evidence) {
		edit(t, ev.Declared.Regs, "milner-dev-bootstrap", func(r *offline.Registration) { r.Name = "cp-1-bootstrap" })
	}, "bootstrap cp-1-bootstrap is not the cluster-level milner-dev-bootstrap"},
	{"exactly one bootstrap, named after the cluster (none if adopted)", func(t *testing.T, ev *Evidence) {
		b, _ := byName(ev.Declared.Regs, "milner-dev-bootstrap")
		b.Name = "cp-2-bootstrap"
		ev.Declared.Regs = append(ev.Declared.Regs, b)
	}, "2 bootstraps, want exactly 1"},
	{"exactly one bootstrap, named after the cluster (none if adopted)", func(t *testing.T, ev *Evidence) {
		adopted := *ev.Config // shared by the cases
		adopted.Cluster.AdoptBootstrap = true
		ev.Config = &adopted
	}, "1 bootstraps of a cluster bootstrapped outside this state (milner:cluster.adoptBootstrap), want none"},
	{"every node config, generated by the provider's machinery, passes the validator of the Talos the nodes run (talosVersion), for the stack's platform", func(t *testing.T, ev *Evidence) {
		// A VIP that is not an address: the provider would only refuse it
		// on a live node; Talos' validator refuses it here.
		breakPatch(t, ev, "cp-2", `"vip":{"ip":"10.73.0.240"}`, `"vip":{"ip":"10.73.0.x"}`)
	}, `node cp-2: machinery v1.12.0 (the provider's) refuses what it generated: 1 error occurred:`},
	{"every node config, generated by the provider's machinery, passes the validator of the Talos the nodes run (talosVersion), for the stack's platform", func(t *testing.T, ev *Evidence) {
		breakPatch(t, ev, "cp-1", `"install":{`, `"instal":{`)
	}, "node cp-1: machinery v1.12.0 (the provider's) cannot generate it: load patches: unknown keys found during decoding"},
	{"every node config, generated by the provider's machinery, passes the validator of the Talos the nodes run (talosVersion), for the stack's platform", func(t *testing.T, ev *Evidence) {
		// A document Talos v1.12 knows and v1.11 does not: the provider's
		// machinery generates it, the machinery of nodes on v1.11 refuses it.
		addPatch(t, ev, "cp-3", "apiVersion: v1alpha1\nkind: OOMConfig\nsampleInterval: 100ms\n")
		cfg := *ev.Config
		cfg.Cluster.TalosVersion = "v1.11.6"
		ev.Config = &cfg
	}, "node cp-3: machinery v1.11.6 (the nodes run Talos v1.11.6) refuses the config machinery v1.12.0 (the provider's) generated: load: "},
	{"every node config, generated by the provider's machinery, passes the validator of the Talos the nodes run (talosVersion), for the stack's platform", func(t *testing.T, ev *Evidence) {
		// A Talos minor outside the supported-versions table is said, not passed.
		cfg := *ev.Config
		cfg.Cluster.TalosVersion = "v1.14.0"
		ev.Config = &cfg
	}, `unsupported Talos v1.14: Milner supports Talos v1.9 to v1.13`},
	{"every resource passes Milner's policy pack (internal/policypack): protection, secret outputs, pinned charts, apply mode, no reset", func(t *testing.T, ev *Evidence) {
		edit(t, ev.Declared.Regs, "milner-dev-secrets", func(r *offline.Registration) { r.Options.Protect = false })
	}, "milner-protected: milner-dev-secrets (talos:machine/secrets:Secrets) is not protected"},
	{"every resource passes Milner's policy pack (internal/policypack): protection, secret outputs, pinned charts, apply mode, no reset", func(t *testing.T, ev *Evidence) {
		edit(t, ev.Declared.Regs, "milner-dev-secrets", func(r *offline.Registration) { r.Options.AdditionalSecretOutputs = nil })
	}, "milner-secret-outputs: milner-dev-secrets (talos:machine/secrets:Secrets) does not mark output machineSecrets secret"},
	{"releases have a fixed name and are atomic", func(t *testing.T, ev *Evidence) {
		edit(t, ev.Declared.Regs, "vault-release", func(r *offline.Registration) { delete(r.Inputs, "name") })
	}, "vault-release has no fixed release name"},
	{"releases have a fixed name and are atomic", func(t *testing.T, ev *Evidence) {
		edit(t, ev.Declared.Regs, "vault-release", func(r *offline.Registration) { r.Inputs["atomic"] = resource.NewProperty(false) })
	}, "vault-release is not atomic"},
	{"every resource passes Milner's policy pack (internal/policypack): protection, secret outputs, pinned charts, apply mode, no reset", func(t *testing.T, ev *Evidence) {
		edit(t, ev.Declared.Regs, "vault-release", func(r *offline.Registration) { r.Inputs["version"] = resource.NewProperty("^0.29") })
	}, `milner-pinned-charts: vault-release: chart version "^0.29" is not pinned`},
	{"what plain `pulumi` must not delete or replace carries its lifecycle hook", func(t *testing.T, ev *Evidence) {
		edit(t, ev.Declared.Regs, "metallb-release", func(r *offline.Registration) { r.Options.BeforeDelete = nil })
	}, "metallb-release (kubernetes:helm.sh/v3:Release) has before-delete hooks [], want [milner-keep-release]"},
	{"what plain `pulumi` must not delete or replace carries its lifecycle hook", func(t *testing.T, ev *Evidence) {
		edit(t, ev.Declared.Regs, "milner-dev-cp-2-data", func(r *offline.Registration) { r.Options.BeforeDelete = nil })
	}, "milner-dev-cp-2-data (libvirt:index/volume:Volume) has before-delete hooks [], want [milner-keep-persistent]"},
	{"what plain `pulumi` must not delete or replace carries its lifecycle hook", func(t *testing.T, ev *Evidence) {
		edit(t, ev.Declared.Regs, "milner-dev-cp-1", func(r *offline.Registration) { r.Options.BeforeDelete = []string{"milner-keep-persistent"} })
	}, "milner-dev-cp-1 (libvirt:index/domain:Domain) has before-delete hooks [milner-keep-persistent], want []"},
	{"every resource passes Milner's policy pack (internal/policypack): protection, secret outputs, pinned charts, apply mode, no reset", func(t *testing.T, ev *Evidence) {
		edit(t, ev.Declared.Regs, "cp-2-apply", func(r *offline.Registration) { r.Options.AdditionalSecretOutputs = nil })
	}, "milner-secret-outputs: cp-2-apply (talos:machine/configurationApply:ConfigurationApply) does not mark output machineConfigurationInput secret"},
}

func TestEveryRuleCanFail(t *testing.T) {
	for _, tt := range failureCases {
		t.Run(tt.rule+"/"+tt.want, func(t *testing.T) {
			ev := dev(t)
			tt.doctor(t, ev)
			fig := Evaluate("dev", ev)
			for _, r := range fig.Results {
				failed := len(r.Problems) > 0
				if r.Rule != tt.rule {
					if failed {
						t.Errorf("doctoring for %q also broke %q: %q", tt.rule, r.Rule, r.Problems)
					}
					continue
				}
				want := strings.ReplaceAll(tt.want, "{bumped}", ev.Bumped.TalosVersion)
				if !failed || !strings.Contains(strings.Join(r.Problems, "\n"), want) {
					t.Errorf("%s: problems %q, want one saying %q", r.Rule, r.Problems, want)
				}
			}
			if fig.OK() {
				t.Error("the figure is OK with a broken rule")
			}
		})
	}
}

func TestEveryRuleHasAFailureCase(t *testing.T) {
	for _, r := range Rules {
		if !slices.ContainsFunc(failureCases, func(c failureCase) bool { return c.rule == r.Name }) {
			t.Errorf("rule %q has no failure case", r.Name)
		}
	}
}

// TestCommittedStacksConform is the CI gate: every committed stack holds
// every rule that applies to it.
func TestCommittedStacksConform(t *testing.T) {
	ss, err := stackfile.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		ev, err := Collect(s)
		if err != nil {
			t.Fatal(err)
		}
		ev.Tools = tools
		if fig := Evaluate(s.Name, ev); !fig.OK() {
			t.Errorf("%s", fig)
		}
	}
}

func TestFigureString(t *testing.T) {
	f := Figure{Stack: "x", Results: []Result{
		{Rule: "a", Applies: true},
		{Rule: "b", Applies: true, Problems: []string{"p1"}},
		{Rule: "c"},
	}}
	want := "conformance x: 1/2\n  FAIL  b\n          - p1\n  n/a   c (layer not declared)\n"
	if got := f.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// bootMediaTypes are retained on delete instead of protected.
var bootMediaTypes = []string{gate.TypeProxmoxImage, gate.TypeProxmoxFile}

// TestBootMediaMayBeRetainedInsteadOfProtected: the Proxmox image of a Talos
// version is retained on delete (a bump drops it from the program): without
// it the bump deletes the image.
func TestBootMediaMayBeRetainedInsteadOfProtected(t *testing.T) {
	s, err := stackfile.Read(filepath.Join(root, "Pulumi.prod.yaml"), nil)
	if err != nil {
		t.Skipf("no prod stack: %v", err)
	}
	ev, err := Collect(s)
	if err != nil {
		t.Fatal(err)
	}
	var image string
	for _, r := range ev.Declared.Regs {
		// The image itself: the first-config snippets are boot media too.
		if slices.Contains(bootMediaTypes, r.Type) && r.Type == gate.TypeProxmoxImage {
			image = r.Name
		}
	}
	if image == "" {
		t.Fatal("prod declares no boot image")
	}
	edit(t, ev.Declared.Regs, image, func(r *offline.Registration) { r.Options.RetainOnDelete, r.Options.Protect = false, false })
	if p := versionBumpSafe(ev); len(p) != 1 || !strings.Contains(p[0], image+" leaves the program") {
		t.Errorf("image dropped by the bump without retainOnDelete: problems %q", p)
	}
}

// breakPatch rewrites one node's own patch in the run's getConfiguration
// invoke, replacing old with new.
func breakPatch(t *testing.T, ev *Evidence, node, old, new string) {
	t.Helper()
	for i, inv := range ev.Declared.Invokes {
		if inv.Token != TokenGetConfiguration {
			continue
		}
		p := strs(inv.Args["configPatches"])
		if h, _ := hostname(p); h != node {
			continue
		}
		if !strings.Contains(p[0], old) {
			t.Fatalf("node %s's patch has no %s", node, old)
		}
		args := inv.Args.Copy()
		args["configPatches"] = resource.NewProperty([]resource.PropertyValue{resource.NewProperty(strings.Replace(p[0], old, new, 1))})
		ev.Declared.Invokes[i].Args = args
		return
	}
	t.Fatalf("no node config for %s", node)
}

// addPatch appends a patch to a node's config patches.
func addPatch(t *testing.T, ev *Evidence, node, patch string) {
	t.Helper()
	for i, inv := range ev.Declared.Invokes {
		if h, _ := hostname(strs(inv.Args["configPatches"])); inv.Token != TokenGetConfiguration || h != node {
			continue
		}
		var patches []resource.PropertyValue
		for _, p := range append(strs(inv.Args["configPatches"]), patch) {
			patches = append(patches, resource.NewProperty(p))
		}
		args := inv.Args.Copy()
		args["configPatches"] = resource.NewProperty(patches)
		ev.Declared.Invokes[i].Args = args
		return
	}
	t.Fatalf("no node config for %s", node)
}
