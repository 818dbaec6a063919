package config

import (
	"encoding/json"
	"fmt"
	"github.com/milner/milner/components/vocab"
	"regexp"
	"slices"
	"strings"
)

// Secret config keys of the apps layer. Each is read only where the config
// needs it, with the secret getters; none is ever a Helm value.
const (
	// KubeconfigKey holds the kubeconfig of an existing cluster (startAt: apps).
	KubeconfigKey = "kubeconfig"
	// VaultTLSCertKey, VaultTLSKeyKey and VaultTLSCAKey hold Vault's listener
	// certificate (PEM, with its chain), its private key and the CA that issued it.
	VaultTLSCertKey = "vaultTlsCert"
	VaultTLSKeyKey  = "vaultTlsKey"
	VaultTLSCAKey   = "vaultTlsCa"
	// WoodpeckerAgentSecretKey is the secret shared by Woodpecker's server and agents.
	WoodpeckerAgentSecretKey = "woodpeckerAgentSecret"
	// WoodpeckerForgeClientKey and WoodpeckerForgeSecretKey are the OAuth
	// application's client id and secret at the forge.
	WoodpeckerForgeClientKey = "woodpeckerForgeClient"
	WoodpeckerForgeSecretKey = "woodpeckerForgeSecret"
)

// Chart names that select a hardened app profile.
const (
	VaultChart      = "vault"
	WoodpeckerChart = "woodpecker"
)

// StorageConfig is milner:storage: local-path-provisioner on every node's
// data disk, and the cluster's default StorageClass. Every field has a default.
type StorageConfig struct {
	// Enabled installs the storage layer (default true). Disable it only on
	// an existing cluster (startAt: apps) that has a default StorageClass.
	Enabled *bool `json:"enabled,omitempty" default:"true"`
	// Chart pins the local-path-provisioner chart; see DefaultStorageChart.
	Chart ChartConfig `json:"chart" default:"local-path-provisioner 0.0.33 from oci://ghcr.io/rancher/local-path-provisioner/charts"`
	// Namespace is the provisioner's namespace (PodSecurity privileged: its
	// helper pods mount host paths). Default local-path-storage.
	Namespace string `json:"namespace,omitempty" default:"local-path-storage"`
	// Path is the directory on every node that holds the volumes; it must be
	// on the data disk (default /var/mnt/data/local-path-provisioner).
	Path string `json:"path,omitempty" default:"/var/mnt/data/local-path-provisioner"`
	// StorageClass is the default StorageClass's name (default local-path).
	StorageClass string `json:"storageClass,omitempty" default:"local-path"`
	// ReclaimPolicy is Retain (default: a deleted PVC leaves its data on the
	// node) or Delete.
	ReclaimPolicy string `json:"reclaimPolicy,omitempty" default:"Retain"`
}

// On reports whether the storage layer is installed.
func (s StorageConfig) On() bool { return s.Enabled == nil || *s.Enabled }

// DefaultStorageChart is local-path-provisioner's chart as rancher
// publishes it (see PublishedCharts), at the version Milner pins.
var DefaultStorageChart = ChartConfig{
	Repo:    "oci://ghcr.io/rancher/local-path-provisioner/charts",
	Name:    StorageChartName,
	Version: "0.0.33",
}

// Storage defaults.
const (
	DefaultStorageNamespace = "local-path-storage"
	DefaultStorageClass     = "local-path"
	DefaultReclaimPolicy    = "Retain"
	// StorageAppName is the storage layer's HelmApp logical name (a state contract).
	StorageAppName = "local-path-provisioner"
)

// DefaultStoragePath is the volumes' directory on the data disk.
var DefaultStoragePath = DataMountpoint + "/local-path-provisioner"

// VaultConfig makes an app Milner's hardened Vault: TLS on the listener
// (certificate from the secret keys VaultTLS*), integrated raft storage on
// PVCs of the storage layer, an audit PVC, never dev mode.
type VaultConfig struct {
	// Replicas is the number of raft peers (default 1; 3 or 5 for HA).
	Replicas int `json:"replicas,omitempty" default:"1"`
	// DataSize is each peer's raft PVC size (default 10Gi).
	DataSize string `json:"dataSize,omitempty" default:"10Gi"`
	// AuditSize is each peer's audit log PVC size (default 10Gi).
	AuditSize string `json:"auditSize,omitempty" default:"10Gi"`
}

// WoodpeckerConfig configures Woodpecker CI and the forge it serves.
type WoodpeckerConfig struct {
	// Host is Woodpecker's public https:// URL (WOODPECKER_HOST); the forge
	// redirects OAuth logins to <host>/authorize.
	Host string `json:"host"`
	// Admins are forge user names made Woodpecker admins.
	Admins []string `json:"admins,omitempty"`
	// Forge is the forge Woodpecker logs in to and reads repositories from.
	Forge *ForgeConfig `json:"forge"`
}

// ForgeKind is a forge Woodpecker 3 supports.
type ForgeKind string

// The forges.
const (
	ForgeGitea   ForgeKind = "gitea"
	ForgeForgejo ForgeKind = "forgejo"
	ForgeGitHub  ForgeKind = "github"
	ForgeGitLab  ForgeKind = "gitlab"
)

// ForgeKinds lists the forges.
var ForgeKinds = []ForgeKind{ForgeGitea, ForgeForgejo, ForgeGitHub, ForgeGitLab}

// ForgeConfig is a Woodpecker forge. Its OAuth client id and secret are the
// secret keys WoodpeckerForgeClientKey and WoodpeckerForgeSecretKey.
type ForgeConfig struct {
	// Kind is gitea, forgejo, github or gitlab.
	Kind ForgeKind `json:"kind"`
	// URL is the forge's https:// URL; required for gitea and forgejo,
	// default https://github.com and https://gitlab.com.
	URL string `json:"url,omitempty" default:"https://github.com or https://gitlab.com"`
}

// WorkloadsConfig is milner:workloads: room reserved for a hosted system
// that is not a Helm release (the seeds' Evolved-NPCs).
type WorkloadsConfig struct {
	// Name is the logical name; also the namespace and PriorityClass name
	// unless Namespace is set. Default evolved-npcs.
	Name string `json:"name,omitempty" default:"evolved-npcs"`
	// Namespace is the workloads' namespace (default Name).
	Namespace string `json:"namespace,omitempty" default:"the workloads' name"`
	// PodSecurity is the level the namespace enforces (default baseline).
	PodSecurity vocab.PodSecurityLevel `json:"podSecurity,omitempty" default:"baseline"`
	// PrivilegedAcknowledged must be true for PodSecurity privileged (see
	// AppConfig.PrivilegedAcknowledged).
	PrivilegedAcknowledged bool `json:"privilegedAcknowledged,omitempty"`
	// Quota is the ResourceQuota's hard limits by resource name
	// (requests.cpu and requests.memory required).
	Quota map[string]string `json:"quota"`
	// DefaultRequest is each container's default request (default cpu 100m, memory 128Mi).
	DefaultRequest map[string]string `json:"defaultRequest,omitempty" default:"cpu 100m, memory 128Mi"`
	// DefaultLimit is each container's default limit (default cpu 1, memory 1Gi).
	DefaultLimit map[string]string `json:"defaultLimit,omitempty" default:"cpu 1, memory 1Gi"`
	// Max is each container's maximum (optional).
	Max map[string]string `json:"max,omitempty"`
	// Priority is the PriorityClass value (default 1000).
	Priority int `json:"priority,omitempty" default:"1000"`
	// PreemptionPolicy is Never (default: the workloads queue ahead but
	// never evict Vault or CI) or PreemptLowerPriority.
	PreemptionPolicy string `json:"preemptionPolicy,omitempty" default:"Never"`
	// DedicatedNodes are nodes labelled and tainted for the workloads alone
	// (through Talos: machine.nodeLabels / machine.nodeTaints).
	DedicatedNodes []string `json:"dedicatedNodes,omitempty"`
}

// Workloads defaults and the node label/taint key of dedicated nodes.
const (
	DefaultWorkloadsName = "evolved-npcs"
	DefaultPriority      = 1000
	// MaxPriority is the highest value of a user PriorityClass (Kubernetes
	// reserves larger values for system classes).
	MaxPriority = 1000000000
	// DedicatedKey labels and taints dedicated nodes: <key>=<namespace>,
	// taint effect NoSchedule. Workload pods select the label and tolerate the taint.
	DedicatedKey = "milner.io/workloads"
)

// quotaResources are the ResourceQuota keys milner:workloads.quota accepts.
var quotaResources = []string{"requests.cpu", "requests.memory", "limits.cpu", "limits.memory", "requests.storage", "persistentvolumeclaims", "pods"}

// quantity matches a Kubernetes resource quantity (k8s.io/apimachinery
// pkg/api/resource quantity.go: a decimal number with a binary-SI,
// decimal-SI or decimal-exponent suffix).
var quantity = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][-+]?[0-9]+)?$`)

// applyAppsDefaults fills the apps layer's unset optional values.
func (c *Config) applyAppsDefaults() {
	s := &c.Storage
	if s.Chart.Repo == "" && s.Chart.Name == "" && s.Chart.Version == "" && s.Chart.Path == "" {
		s.Chart = DefaultStorageChart
	}
	if s.Namespace == "" {
		s.Namespace = DefaultStorageNamespace
	}
	if s.Path == "" {
		s.Path = DefaultStoragePath
	}
	if s.StorageClass == "" {
		s.StorageClass = DefaultStorageClass
	}
	if s.ReclaimPolicy == "" {
		s.ReclaimPolicy = DefaultReclaimPolicy
	}
	for i := range c.Apps {
		a := &c.Apps[i]
		if a.PodSecurity == "" {
			a.PodSecurity = vocab.Baseline
		}
		if v := a.Vault; v != nil {
			if v.Replicas == 0 {
				v.Replicas = 1
			}
			if v.DataSize == "" {
				v.DataSize = "10Gi"
			}
			if v.AuditSize == "" {
				v.AuditSize = "10Gi"
			}
		}
		if w := a.Woodpecker; w != nil && w.Forge != nil && w.Forge.URL == "" {
			switch w.Forge.Kind {
			case ForgeGitHub:
				w.Forge.URL = "https://github.com"
			case ForgeGitLab:
				w.Forge.URL = "https://gitlab.com"
			}
		}
	}
	if w := c.Workloads; w != nil {
		if w.Name == "" {
			w.Name = DefaultWorkloadsName
		}
		if w.Namespace == "" {
			w.Namespace = w.Name
		}
		if w.PodSecurity == "" {
			w.PodSecurity = vocab.Baseline
		}
		if w.DefaultRequest == nil {
			w.DefaultRequest = map[string]string{"cpu": "100m", "memory": "128Mi"}
		}
		if w.DefaultLimit == nil {
			w.DefaultLimit = map[string]string{"cpu": "1", "memory": "1Gi"}
		}
		if w.Priority == 0 {
			w.Priority = DefaultPriority
		}
		if w.PreemptionPolicy == "" {
			w.PreemptionPolicy = "Never"
		}
	}
}

// vaultOwned are the Vault chart values the hardened profile sets; a stack
// may not set them in values.
var vaultOwned = []string{
	"global.tlsDisable", "server.dev", "server.standalone", "server.ha",
	"server.dataStorage", "server.auditStorage", "server.volumes", "server.volumeMounts",
	"server.extraEnvironmentVars.VAULT_CACERT",
}

// woodpeckerOwned are the Woodpecker chart values Milner sets; a stack may
// not set them in values (secrets never go through Helm values).
var woodpeckerOwned = []string{
	"server.createAgentSecret", "server.extraSecretNamesForEnvFrom", "server.env.WOODPECKER_HOST",
	"server.env.WOODPECKER_AGENT_SECRET", "server.env.WOODPECKER_ADMIN",
	"agent.mapAgentSecret", "agent.extraSecretNamesForEnvFrom", "agent.env.WOODPECKER_AGENT_SECRET",
}

// validateAppsLayer checks the apps layer beyond each release's basics:
// storage, the hardened profiles, namespaces, workloads.
func (c *Config) validateAppsLayer(p *problems) {
	namespaces := map[string]string{}
	claim := func(path, ns string) {
		if other, taken := namespaces[ns]; taken {
			p.addf(path, "%q is also the namespace of %s; each app owns its namespace", ns, other)
			return
		}
		namespaces[ns] = path
	}

	s := c.Storage
	sp := Key("storage")
	if s.On() {
		claim(sp+".namespace", s.Namespace)
		if !dnsLabel.MatchString(s.Namespace) {
			p.addf(sp+".namespace", "%q is not a lowercase DNS label", s.Namespace)
		}
		if !strings.HasPrefix(s.Path, "/var/") || strings.Contains(s.Path, "..") {
			p.addf(sp+".path", "%q is not an absolute path under /var (Talos' only writable tree; the data disk is at %s)", s.Path, DataMountpoint)
		}
		if !dnsLabel.MatchString(s.StorageClass) {
			p.addf(sp+".storageClass", "%q is not a lowercase DNS label", s.StorageClass)
		}
		if s.ReclaimPolicy != "Retain" && s.ReclaimPolicy != "Delete" {
			p.addf(sp+".reclaimPolicy", "unknown reclaim policy %q (want Retain or Delete)", s.ReclaimPolicy)
		}
		validateChart(p, sp+".chart", c.dir, &c.Storage.Chart)
	}
	c.validateLoadBalancer(p, claim)
	c.validateExpose(p)

	vaults, woodpeckers := 0, 0
	for i := range c.Apps {
		a := &c.Apps[i]
		ap := fmt.Sprintf("%s[%d]", Key("apps"), i)
		claim(ap+".namespace", a.Namespace)
		if !a.PodSecurity.Valid() {
			p.addf(ap+".podSecurity", "unknown level %q (want one of %v)", a.PodSecurity, vocab.PodSecurityLevels)
		}
		switch {
		case a.Chart.Name == VaultChart && a.Vault == nil:
			p.addf(ap+".vault", "is required for the vault chart: Milner runs Vault only hardened (TLS, raft storage, audit device)")
		// A local chart is what its profile section says it is: a
		// vendored or forked chart may carry another name.
		case a.Chart.Name != VaultChart && a.Vault != nil && a.Chart.Path == "":
			p.addf(ap+".vault", "is set but the chart is %q, not %s", a.Chart.Name, VaultChart)
		case a.Vault != nil:
			vaults++
			c.validateVault(p, ap, a)
		}
		switch {
		case a.Chart.Name != WoodpeckerChart && a.Woodpecker != nil && a.Chart.Path == "":
			p.addf(ap+".woodpecker", "is set but the chart is %q, not %s", a.Chart.Name, WoodpeckerChart)
		case a.WoodpeckerOff():
			// The forge is the user's: without one Woodpecker has nothing
			// to log in to (the Woodpecker 3 server exits "forge not
			// configured"), so it is not installed.
			p.warnf(ap+".woodpecker.forge", "is not set: Woodpecker is off (no release); to run it, set woodpecker.host, woodpecker.forge.kind (one of %v) and forge.url to the forge you run, and the secrets %s and %s",
				ForgeKinds, Key(WoodpeckerForgeClientKey), Key(WoodpeckerForgeSecretKey))
			if a.Woodpecker != nil {
				validateWoodpecker(p, ap, a)
			}
		case a.Woodpecker != nil:
			woodpeckers++
			validateWoodpecker(p, ap, a)
		}
	}
	if vaults > 1 {
		p.addf(Key("apps"), "%d apps are Vault; one stack runs one Vault (its TLS keys are %s...)", vaults, Key(VaultTLSCertKey))
	}
	if woodpeckers > 1 {
		p.addf(Key("apps"), "%d apps are Woodpecker; one stack runs one (its secrets are %s...)", woodpeckers, Key(WoodpeckerAgentSecretKey))
	}

	if w := c.Workloads; w != nil {
		c.validateWorkloads(p, claim)
	}
}

// validateChart checks a chart pin, or a local chart (see
// validateLocalChart; root is the project directory).
func validateChart(p *problems, path, root string, ch *ChartConfig) {
	if ch.Path != "" {
		validateLocalChart(p, path, root, ch)
		return
	}
	if !strings.HasPrefix(ch.Repo, "https://") && !strings.HasPrefix(ch.Repo, "oci://") {
		p.addf(path+".repo", "%q is not an https:// or oci:// chart repository", ch.Repo)
	}
	if ch.Name == "" {
		p.addf(path+".name", "is required")
	}
	if !exactVersion(ch.Version) {
		p.addf(path+".version", "%q is not a pinned chart version (want an exact version like 0.29.1)", ch.Version)
	}
}

func (c *Config) validateVault(p *problems, ap string, a *AppConfig) {
	v := a.Vault
	c.checkVaultQuorum(p, ap+".vault.replicas", v.Replicas)
	sizes := map[string]string{"dataSize": v.DataSize, "auditSize": v.AuditSize}
	for _, field := range sortedKeys(sizes) {
		switch q := sizes[field]; {
		case !quantity.MatchString(q):
			p.addf(ap+".vault."+field, "%q is not a Kubernetes quantity like 10Gi", q)
		case zeroQuantity(q):
			p.addf(ap+".vault."+field, "%q is no space: a PVC of size zero holds nothing (and most provisioners refuse it)", q)
		}
	}
	if !c.Storage.On() {
		p.warnf(ap+".vault", "milner:storage is disabled: Vault's raft and audit PVCs bind to the cluster's own default StorageClass")
	}
	checkExposeOwned(p, ap, a)
	for _, owned := range vaultOwned {
		if _, ok := lookupPath(a.Values, owned); !ok {
			continue
		}
		if dev, _ := lookupPath(a.Values, "server.dev.enabled"); owned == "server.dev" && dev == true {
			p.addf(ap+".values.server.dev.enabled", "Vault dev mode keeps every secret in memory, unsealed, behind a known root token; Milner never runs it: remove the key")
			continue
		}
		p.addf(ap+".values."+owned, "is set by Milner's hardened Vault (TLS, raft, audit); configure it through %s.vault", ap)
	}
	// server.extraArgs and the other values the chart runs are allow-listed:
	// checkChartCode (chartcode.go).
	for _, ext := range vaultExternal {
		v, ok := lookupPath(a.Values, ext)
		off := strings.HasSuffix(ext, ".enabled") && (v == false || v == "false")
		if ok && (off || !strings.HasSuffix(ext, ".enabled") && v != "" && v != nil) {
			p.addf(ap+".values."+ext, "switches the chart to an external Vault (vault-helm _helpers.tpl \"vault.mode\": external): no hardened server would run; remove it")
		}
	}
	for _, path := range sortedKeys(a.SecretValues) {
		hidden := path == "server.extraArgs" || slices.Contains(vaultExternal, path) ||
			slices.ContainsFunc(vaultOwned, func(o string) bool { return path == o || strings.HasPrefix(path, o+".") })
		if hidden || strings.HasPrefix(path, "global.") {
			p.addf(fmt.Sprintf("%s.secretValues[%s]", ap, path), "is set by Milner's hardened Vault")
		}
	}
}

// vaultExternal are the chart values that make it run no server (an
// external Vault's address, or the server disabled).
var vaultExternal = []string{"global.externalVaultAddr", "injector.externalVaultAddr", "global.enabled", "server.enabled"}

// WoodpeckerOff reports whether the app is Woodpecker without a forge:
// valid, and not installed.
func (a AppConfig) WoodpeckerOff() bool {
	return (a.Chart.Name == WoodpeckerChart || a.Woodpecker != nil) && (a.Woodpecker == nil || a.Woodpecker.Forge == nil)
}

func validateWoodpecker(p *problems, ap string, a *AppConfig) {
	w := a.Woodpecker
	wp := ap + ".woodpecker"
	if !strings.HasPrefix(w.Host, "https://") && !strings.HasPrefix(w.Host, "http://") {
		p.addf(wp+".host", "%q is not Woodpecker's public URL (WOODPECKER_HOST), e.g. https://ci.example.org", w.Host)
	}
	if f := w.Forge; f != nil {
		if !slices.Contains(ForgeKinds, f.Kind) {
			p.addf(wp+".forge.kind", "unknown forge %q (want one of %v)", f.Kind, ForgeKinds)
		}
		if !strings.HasPrefix(f.URL, "https://") && !strings.HasPrefix(f.URL, "http://") {
			p.addf(wp+".forge.url", "%q is not the forge's URL (required for %s)", f.URL, f.Kind)
		}
	}
	for _, owned := range woodpeckerOwned {
		if _, ok := lookupPath(a.Values, owned); ok {
			p.addf(ap+".values."+owned, "is set by Milner: secrets reach Woodpecker only through the Kubernetes Secrets its chart reads (extraSecretNamesForEnvFrom)")
		}
	}
	for _, path := range sortedKeys(a.SecretValues) {
		p.addf(fmt.Sprintf("%s.secretValues[%s]", ap, path), "secret values would land in Helm values and the release record; Woodpecker's secrets are %s, %s and %s, read from a Kubernetes Secret",
			Key(WoodpeckerAgentSecretKey), Key(WoodpeckerForgeClientKey), Key(WoodpeckerForgeSecretKey))
	}
}

func (c *Config) validateWorkloads(p *problems, claim func(path, ns string)) {
	w := c.Workloads
	wp := Key("workloads")
	if !dnsLabel.MatchString(w.Name) {
		p.addf(wp+".name", "%q is not a lowercase DNS label", w.Name)
	}
	if !dnsLabel.MatchString(w.Namespace) {
		p.addf(wp+".namespace", "%q is not a lowercase DNS label", w.Namespace)
	}
	claim(wp+".namespace", w.Namespace)
	if !w.PodSecurity.Valid() {
		p.addf(wp+".podSecurity", "unknown level %q (want one of %v)", w.PodSecurity, vocab.PodSecurityLevels)
	}
	for _, r := range []string{"requests.cpu", "requests.memory"} {
		if _, ok := w.Quota[r]; !ok {
			p.addf(wp+".quota", "%s is required: the quota is what reserves room for the workloads", r)
		}
	}
	for _, r := range sortedKeys(w.Quota) {
		if !slices.Contains(quotaResources, r) {
			p.addf(fmt.Sprintf("%s.quota[%s]", wp, r), "unknown resource (want one of %v)", quotaResources)
		} else if !quantity.MatchString(w.Quota[r]) {
			p.addf(fmt.Sprintf("%s.quota[%s]", wp, r), "%q is not a Kubernetes quantity", w.Quota[r])
		}
	}
	limits := map[string]map[string]string{"defaultRequest": w.DefaultRequest, "defaultLimit": w.DefaultLimit, "max": w.Max}
	for _, field := range sortedKeys(limits) {
		m := limits[field]
		for _, r := range sortedKeys(m) {
			if r != "cpu" && r != "memory" {
				p.addf(fmt.Sprintf("%s.%s[%s]", wp, field, r), "unknown resource (want cpu or memory)")
			} else if !quantity.MatchString(m[r]) {
				p.addf(fmt.Sprintf("%s.%s[%s]", wp, field, r), "%q is not a Kubernetes quantity", m[r])
			}
		}
	}
	if w.Priority < 1 || w.Priority > MaxPriority {
		p.addf(wp+".priority", "%d is outside 1..%d (higher values are reserved for system classes)", w.Priority, MaxPriority)
	}
	if w.PreemptionPolicy != "Never" && w.PreemptionPolicy != "PreemptLowerPriority" {
		p.addf(wp+".preemptionPolicy", "unknown policy %q (want Never or PreemptLowerPriority)", w.PreemptionPolicy)
	}
	if len(w.DedicatedNodes) == 0 {
		return
	}
	if c.StartAt == LayerApps {
		p.addf(wp+".dedicatedNodes", "needs the Talos layer to label and taint nodes; on an existing cluster label them yourself (%s=%s, taint NoSchedule)", DedicatedKey, w.Namespace)
		return
	}
	nodes := map[string]bool{}
	for _, n := range c.Nodes {
		nodes[n.Name] = true
	}
	for i, n := range w.DedicatedNodes {
		if !nodes[n] {
			p.addf(fmt.Sprintf("%s.dedicatedNodes[%d]", wp, i), "%q is not a node of milner:nodes", n)
		}
	}
}

// lookupPath finds a dotted path in decoded chart values.
func lookupPath(values map[string]any, path string) (any, bool) {
	var cur any = values
	for _, k := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// SecretNeed is one secret config key the stack needs, and what needs it.
type SecretNeed struct {
	// Key is the key without the milner: namespace.
	Key string
	// NeededBy names what reads it, for the error when it is missing.
	NeededBy string
}

// AppsSecrets lists the secret keys the apps layer of a raw config needs,
// in a stable order: the kubeconfig of an existing cluster, the apps'
// secretValues, Vault's TLS material, Woodpecker's secrets. It decodes
// leniently (Load reports malformed values), so tools that load a stack
// without its passphrase know which keys to fill with placeholders.
func AppsSecrets(src ConfigSource) []SecretNeed {
	var need []SecretNeed
	stop := LayerApps
	if raw, ok := src.GetConfig(Key("stopAfter")); ok {
		stop = Layer(raw)
	}
	if !stop.Includes(LayerApps) {
		return nil
	}
	if raw, _ := src.GetConfig(Key("startAt")); Layer(raw) == LayerApps {
		need = append(need, SecretNeed{KubeconfigKey, "startAt apps"})
	}
	var apps []AppConfig
	if raw, ok := src.GetConfig(Key("apps")); ok {
		_ = json.Unmarshal([]byte(raw), &apps)
	}
	for _, a := range apps {
		by := fmt.Sprintf("app %q", a.Name)
		for _, k := range sortedKeys(a.SecretValues) {
			need = append(need, SecretNeed{a.SecretValues[k], by})
		}
		if a.Vault != nil {
			for _, k := range []string{VaultTLSCertKey, VaultTLSKeyKey, VaultTLSCAKey} {
				need = append(need, SecretNeed{k, by + " (Vault's TLS listener)"})
			}
		}
		if a.Woodpecker != nil && !a.WoodpeckerOff() {
			for _, k := range []string{WoodpeckerAgentSecretKey, WoodpeckerForgeClientKey, WoodpeckerForgeSecretKey} {
				need = append(need, SecretNeed{k, by})
			}
		}
	}
	return need
}
