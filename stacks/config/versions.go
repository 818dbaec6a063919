package config

import (
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/compatibility"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"golang.org/x/mod/semver"
)

// SupportedVersionsFile is the supported-versions table, as refusals and
// docs name it.
const SupportedVersionsFile = "stacks/config/supported-versions.txt"

//go:embed supported-versions.txt
var supportedVersionsText string

// TalosMinor is one row of the supported-versions table: a Talos minor
// Milner supports (the file's header says where each column comes from).
type TalosMinor struct {
	// Minor is the Talos minor, e.g. v1.13.
	Minor string
	// Latest is its newest patch release: the version an upgrade path takes.
	Latest string
	// Kubernetes is the Kubernetes version Latest defaults to: the version an
	// upgrade path takes Kubernetes to on this minor.
	Kubernetes string
	// Validator is the machinery version that validates a node config as
	// this minor's nodes load it (a talos-validate-<Validator> tool).
	Validator string
}

// Supported is the supported-versions table, oldest minor first, one row
// per consecutive minor.
var Supported []TalosMinor

// GeneratorMachinery is the machinery version the Talos provider generates
// every node config with (the table's generator line).
var GeneratorMachinery string

func init() {
	var err error
	if Supported, GeneratorMachinery, err = parseSupported(supportedVersionsText); err != nil {
		panic(fmt.Sprintf("%s: %v", SupportedVersionsFile, err))
	}
}

// parseSupported reads the table and checks every row: exact releases of
// the row's minor, the validator no newer than the latest patch, the
// Kubernetes version one machinery supports on that minor, minors in order
// with none skipped (an upgrade path passes through each).
func parseSupported(text string) ([]TalosMinor, string, error) {
	var rows []TalosMinor
	generator := ""
	header := false
	for i, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		at := fmt.Sprintf("line %d", i+1)
		switch {
		case !header:
			if !slices.Equal(f, []string{"talos", "latest", "kubernetes", "validator"}) {
				return nil, "", fmt.Errorf("%s: want the header \"talos latest kubernetes validator\", got %q", at, line)
			}
			header = true
		case f[0] == "generator":
			if len(f) != 2 || !release(f[1]) {
				return nil, "", fmt.Errorf("%s: want \"generator <exact machinery version>\", got %q", at, line)
			}
			generator = f[1]
		default:
			if len(f) != 4 {
				return nil, "", fmt.Errorf("%s: want 4 columns, got %q", at, line)
			}
			r := TalosMinor{Minor: f[0], Latest: f[1], Kubernetes: f[2], Validator: f[3]}
			if err := r.check(); err != nil {
				return nil, "", fmt.Errorf("%s (%s): %w", at, r.Minor, err)
			}
			if n := len(rows); n > 0 && r.Minor != NextMinor(rows[n-1].Minor) {
				return nil, "", fmt.Errorf("%s: %s follows %s: minors must be consecutive, oldest first", at, r.Minor, rows[n-1].Minor)
			}
			rows = append(rows, r)
		}
	}
	switch {
	case len(rows) == 0:
		return nil, "", fmt.Errorf("no Talos minor")
	case generator == "":
		return nil, "", fmt.Errorf("no generator line")
	}
	return rows, generator, nil
}

func (r TalosMinor) check() error {
	for _, v := range []string{r.Latest, r.Kubernetes, r.Validator} {
		if !release(v) {
			return fmt.Errorf("%q is not an exact release version", v)
		}
	}
	switch {
	case semver.MajorMinor(r.Latest) != r.Minor:
		return fmt.Errorf("latest %s is not a %s release", r.Latest, r.Minor)
	case semver.MajorMinor(r.Validator) != r.Minor || semver.Compare(r.Validator, r.Latest) > 0:
		return fmt.Errorf("validator %s is not a %s release up to %s", r.Validator, r.Minor, r.Latest)
	}
	return r.SupportsKubernetes(r.Kubernetes)
}

// release reports an exact release version: vMAJOR.MINOR.PATCH, no
// pre-release or build.
func release(v string) bool {
	return semver.IsValid(v) && semver.Canonical(v) == v && semver.Prerelease(v) == ""
}

// NextPatch is the patch release after an exact release version:
// v1.9.5 -> v1.9.6; anything else is refused.
func NextPatch(v string) (string, error) {
	if !release(v) {
		return "", fmt.Errorf("%q is not an exact release version", v)
	}
	i := strings.LastIndex(v, ".")
	n, err := strconv.Atoi(v[i+1:])
	if err != nil {
		return "", fmt.Errorf("%q is not an exact release version", v)
	}
	return v[:i+1] + strconv.Itoa(n+1), nil
}

// NextMinor is the minor after vX.N: vX.N+1.
func NextMinor(minor string) string { return addMinor(minor, 1) }

// PrevMinor is the minor before vX.N: vX.N-1.
func PrevMinor(minor string) string { return addMinor(minor, -1) }

func addMinor(minor string, d int) string {
	major, n, _ := strings.Cut(strings.TrimPrefix(semver.MajorMinor(minor), "v"), ".")
	i, _ := strconv.Atoi(n)
	return fmt.Sprintf("v%s.%d", major, i+d)
}

// talosVersion is the row's minor as machinery's compatibility tables take it.
func (r TalosMinor) talosVersion() *compatibility.TalosVersion {
	tv, err := compatibility.ParseTalosVersion(&machine.VersionInfo{Tag: r.Latest})
	if err != nil { // r.Latest is an exact release (check)
		panic(err)
	}
	return tv
}

// SupportsKubernetes refuses a Kubernetes version this Talos minor does
// not support, by machinery's own tables (compatibility
// KubernetesVersion.SupportedWith: Talos v1.13 takes 1.31.0 to 1.36.x), the
// check talosctl upgrade-k8s makes.
func (r TalosMinor) SupportsKubernetes(kube string) error {
	if !release(kube) {
		return fmt.Errorf("%q is not an exact Kubernetes release like v1.36.3", kube)
	}
	kv, err := compatibility.ParseKubernetesVersion(strings.TrimPrefix(kube, "v"))
	if err != nil {
		return err
	}
	if kv.SupportedWith(r.talosVersion()) != nil {
		lo, hi := r.KubernetesRange()
		if lo == "" {
			return fmt.Errorf("the machinery Milner links (go.mod: github.com/siderolabs/talos/pkg/machinery) does not know Talos %s: move it to a release that does", r.Minor)
		}
		return fmt.Errorf("unsupported Kubernetes %s: Talos %s supports Kubernetes %s to %s (machinery's compatibility table)", kube, r.Minor, lo, hi)
	}
	return nil
}

// KubernetesRange is the oldest and newest Kubernetes minor this Talos
// minor supports, as machinery's compatibility table answers ("v1.31",
// "v1.36").
func (r TalosMinor) KubernetesRange() (lo, hi string) {
	tv := r.talosVersion()
	for m := 0; m < 100; m++ {
		kv, err := compatibility.ParseKubernetesVersion(fmt.Sprintf("1.%d.0", m))
		if err != nil || kv.SupportedWith(tv) != nil {
			continue
		}
		if lo == "" {
			lo = fmt.Sprintf("v1.%d", m)
		}
		hi = fmt.Sprintf("v1.%d", m)
	}
	return lo, hi
}

// UpgradesFrom is the oldest Talos minor the row's installer upgrades
// from, as machinery's compatibility table answers (TalosVersion
// UpgradeableFrom: Talos v1.13 takes v1.11 and later).
func (r TalosMinor) UpgradesFrom() string {
	tv := r.talosVersion()
	for m := 0; m < 100; m++ {
		host, err := compatibility.ParseTalosVersion(&machine.VersionInfo{Tag: fmt.Sprintf("v1.%d.0", m)})
		if err == nil && tv.UpgradeableFrom(host) == nil {
			return fmt.Sprintf("v1.%d", m)
		}
	}
	return ""
}

// TalosRow returns the row of a Talos version Milner supports: an exact
// release of a minor in the table (a patch newer than the row's latest is
// the row's too: NewerThanKnown says so). A version outside the table is
// refused, naming the table and the nearest supported version.
func TalosRow(v string) (TalosMinor, error) {
	if !release(v) {
		return TalosMinor{}, fmt.Errorf("%q is not an exact Talos release like %s (no range, no pre-release)", v, Supported[len(Supported)-1].Latest)
	}
	for _, r := range Supported {
		if r.Minor == semver.MajorMinor(v) {
			return r, nil
		}
	}
	oldest, newest := Supported[0], Supported[len(Supported)-1]
	nearest := newest.Latest
	if semver.Compare(v, oldest.Latest) < 0 {
		nearest = oldest.Latest
	}
	return TalosMinor{}, fmt.Errorf("unsupported Talos %s: Milner supports Talos %s to %s (%s, docs/compatibility.md); the nearest supported version is %s", semver.MajorMinor(v), oldest.Minor, newest.Minor, SupportedVersionsFile, nearest)
}

// NewerThanKnown says, for a release of the row's minor newer than its
// latest, that the table does not know it yet ("" otherwise).
func (r TalosMinor) NewerThanKnown(v string) string {
	if semver.Compare(v, r.Latest) <= 0 {
		return ""
	}
	return fmt.Sprintf("Talos %s is newer than the newest %s release the supported-versions table knows (%s, %s): its configs are validated as %s's, and an upgrade path through %s takes %s", v, r.Minor, r.Latest, SupportedVersionsFile, r.Validator, r.Minor, r.Latest)
}

// Validators are the machinery versions a config validator is built for:
// the generator's and every row's, sorted, each once.
func Validators() []string {
	out := []string{GeneratorMachinery}
	for _, r := range Supported {
		out = append(out, r.Validator)
	}
	semver.Sort(out)
	return slices.Compact(out)
}

// GeneratorContract is the newest machine-config contract the provider's
// machinery knows: the generator's minor. A contract past it would be
// generated as this one while claiming more.
func GeneratorContract() string { return semver.MajorMinor(GeneratorMachinery) }

// HostnameDocument reports whether the cluster's config contract generates
// a HostnameConfig document (v1.12+), so the node's hostname goes there
// rather than in machine.network.hostname. Validation has refused a
// malformed contract; this answers false for one.
func (c ClusterConfig) HostnameDocument() bool {
	vc, err := talosconfig.ParseContractFromVersion(c.ConfigContract)
	return err == nil && vc.MultidocNetworkConfigSupported()
}
