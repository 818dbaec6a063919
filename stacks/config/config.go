// Package config is Milner's stack config: the typed mirror of
// Pulumi.<stack>.yaml, its one loader (Load), the defaults and the
// validation that reports every problem at once, each by its config path.
// It imports no component and no resource SDK, so the operator tool and
// the tests read a stack through it without linking the program.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/milner/milner/components/vocab"
)

// Namespace is the config namespace of every Milner key (milner:<key>):
// Pulumi namespaces a project's keys by the project's name.
const Namespace = vocab.Project

// Keys lists every structured config key the program reads, in the order a
// stack file shows them. Secrets named by apps and the Proxmox token are
// separate, secret keys.
var Keys = []string{"cluster", "substrate", "network", "nodes", "storage", "loadBalancer", "apps", "chartMirrors", "workloads", "startAt", "stopAfter", "waitForApps"}

// Config mirrors a stack's Pulumi.<stack>.yaml: one field per milner: key.
// Load fills it once; nothing else reads stack config.
type Config struct {
	// Cluster is milner:cluster.
	Cluster ClusterConfig `json:"cluster"`
	// Substrate is milner:substrate.
	Substrate SubstrateConfig `json:"substrate"`
	// Network is milner:network.
	Network NetworkConfig `json:"network"`
	// Nodes is milner:nodes, in bring-up order; the first control plane bootstraps etcd.
	Nodes []NodeConfig `json:"nodes"`
	// Apps is milner:apps, the Helm releases the cluster hosts.
	Apps []AppConfig `json:"apps"`
	// StopAfter is milner:stopAfter: the last layer to declare.
	StopAfter Layer `json:"stopAfter"`
	// StartAt is milner:startAt: the first layer to declare; apps runs the
	// apps layer on an existing cluster given by the secret milner:kubeconfig.
	StartAt Layer `json:"startAt"`
	// WaitForApps is milner:waitForApps (default true): Helm releases wait
	// for their pods. False is for tests on an API server without kubelets.
	WaitForApps bool `json:"-"`
	// Storage is milner:storage, the storage layer under the apps.
	Storage StorageConfig `json:"storage"`
	// LoadBalancer is milner:loadBalancer, MetalLB for the apps' Services.
	LoadBalancer LoadBalancerConfig `json:"loadBalancer"`
	// Workloads is milner:workloads, room reserved for Evolved-NPCs (optional).
	Workloads *WorkloadsConfig `json:"workloads,omitempty"`
	// ChartMirrors is milner:chartMirrors: where charts are fetched from
	// instead of their published sources (optional).
	ChartMirrors ChartMirrors `json:"chartMirrors,omitempty"`

	// Warnings are problems that do not stop the program (e.g. an even control-plane count).
	Warnings []string `json:"-"`

	// dir is the project directory relative chart paths are read from
	// ("": the working directory).
	dir string
}

// ClusterConfig is milner:cluster.
type ClusterConfig struct {
	// Name is the cluster name; every substrate object is named after it.
	Name string `json:"name"`
	// TalosVersion is the Talos OS version the nodes should run, e.g.
	// v1.13.9: the installer image of new installs and the target of
	// `milner upgrade`. An up never upgrades a running node.
	TalosVersion string `json:"talosVersion"`
	// ConfigContract is the Talos machine-config contract, e.g. v1.9: the
	// version the cluster was created with, fixed for its life (upstream:
	// the generator's talos_version). `milner up` refuses a change.
	ConfigContract string `json:"configContract"`
	// KubernetesVersion is the Kubernetes version, e.g. v1.32.3.
	KubernetesVersion string `json:"kubernetesVersion"`
	// VIP is the control-plane virtual IP every control plane announces.
	VIP string `json:"vip"`
	// Endpoint is the Kubernetes API URL; defaults to https://<vip>:6443.
	Endpoint string `json:"endpoint,omitempty" default:"https://<vip>:6443"`
	// InstallImage is the Talos installer image; defaults to ghcr.io/siderolabs/installer:<talosVersion>.
	InstallImage string `json:"installImage,omitempty" default:"ghcr.io/siderolabs/installer:<talosVersion>"`
	// AllowSchedulingOnControlPlanes lets workloads run on control planes;
	// defaults to true when the stack has no worker.
	AllowSchedulingOnControlPlanes *bool `json:"allowSchedulingOnControlPlanes,omitempty" default:"true without workers"`
	// defaultScheduling is set when AllowSchedulingOnControlPlanes is the
	// default: it follows the workers, so adding the first one turns it off.
	defaultScheduling bool
	// AdoptBootstrap records that the cluster's etcd was bootstrapped
	// outside this state (a control plane answered the Talos API with etcd
	// members; `milner adopt` writes it): the program declares no
	// <cluster>-bootstrap, so etcd is never bootstrapped a second time.
	AdoptBootstrap bool `json:"adoptBootstrap,omitempty"`
	// OIDC is milner:cluster.oidc: kubectl through the site's OIDC
	// provider, the admin certificate as break-glass (optional).
	OIDC *OIDCConfig `json:"oidc,omitempty"`

	// VIPAddr is VIP, parsed.
	VIPAddr netip.Addr `json:"-"`
}

// SubstrateConfig is milner:substrate.
type SubstrateConfig struct {
	// Kind selects the implementation: libvirt or proxmox.
	Kind Kind `json:"kind"`
	// Libvirt configures kind libvirt.
	Libvirt *LibvirtConfig `json:"libvirt,omitempty"`
	// Proxmox configures kind proxmox.
	Proxmox *ProxmoxConfig `json:"proxmox,omitempty"`
}

// LibvirtConfig is milner:substrate.libvirt.
type LibvirtConfig struct {
	// URI is the libvirt connection URI; defaults to qemu:///system.
	URI string `json:"uri,omitempty" default:"qemu:///system"`
	// DomainType is kvm (default) or qemu where there is no KVM.
	DomainType string `json:"domainType,omitempty" default:"kvm"`
	// CPUMode is the libvirt CPU mode of every domain: host-passthrough
	// (default for kvm) or maximum (default for qemu).
	CPUMode string `json:"cpuMode,omitempty" default:"host-passthrough for kvm, maximum for qemu"`
	// PoolPath is the storage pool directory; defaults to /var/lib/libvirt/images/<cluster>.
	PoolPath string `json:"poolPath,omitempty" default:"/var/lib/libvirt/images/<cluster>"`
	// BootImage is the path or URL of the Talos disk image that seeds new OS
	// disks; defaults to the Talos image factory's metal image of talosVersion.
	BootImage string `json:"bootImage,omitempty" default:"the image factory's metal image of talosVersion"`
	// BootImageSHA256 is the image's SHA-256 digest (hex): required with an
	// explicit URL, verified by `milner up` against a local file.
	BootImageSHA256 string `json:"bootImageSha256,omitempty"`
	// Adopt maps the logical name of a pool, network or volume of the stack
	// (LibvirtAdoptable) to the live object's id, imported by the
	// next up: how a stack whose state was lost takes its objects back
	// (`milner adopt --all` writes it). Domains use nodes[i].adoptId.
	Adopt map[string]string `json:"adopt,omitempty"`

	// defaultImage is set when BootImage is the derived factory URL.
	defaultImage bool
	// bootCopy is BootImageCache of BootImageSHA256, resolved by Load.
	bootCopy string
}

// ProxmoxConfig is milner:substrate.proxmox. The API token is not here: it
// is the secret key milner:proxmoxApiToken (see ProxmoxTokenKey).
type ProxmoxConfig struct {
	// Endpoint is the Proxmox VE API URL, e.g. https://pve.lan:8006/.
	Endpoint string `json:"endpoint"`
	// Insecure skips TLS verification of the API. Off by default: trust a
	// self-signed PVE CA instead (docs/proxmox.md "TLS"). Needs InsecureAcknowledged.
	Insecure bool `json:"insecure,omitempty"`
	// InsecureAcknowledged must be true for Insecure: the API token then goes
	// to whoever answers on the network. Every run warns while it is set.
	InsecureAcknowledged bool `json:"insecureAcknowledged,omitempty"`
	// NodeName is the default Proxmox host (PVE node) of nodes that do not
	// name one in nodes[i].proxmoxNode. Kept under this name so that stacks
	// written for one host stay valid.
	NodeName string `json:"nodeName"`
	// AllowControlPlanesOnOneHost turns the refusal of two control planes on
	// one host (when the nodes run on several hosts) into a warning.
	AllowControlPlanesOnOneHost bool `json:"allowControlPlanesOnOneHost,omitempty"`
	// OSDatastore holds the node VMs' OS disks and cloud-init drives.
	OSDatastore string `json:"osDatastore"`
	// DataDatastore holds the persistent data disks (owned by the holder VMs).
	DataDatastore string `json:"dataDatastore"`
	// ImageDatastore holds the Talos boot images; it must allow content type "import".
	ImageDatastore string `json:"imageDatastore"`
	// Bridge is the Linux bridge the node NICs attach to.
	Bridge string `json:"bridge"`
	// DiskInterface is the bus of both disks of a node VM: virtio (default), scsi or sata.
	DiskInterface vocab.DiskInterface `json:"diskInterface,omitempty" default:"virtio"`
	// ImageURL is the uncompressed Talos nocloud disk image to download;
	// defaults to the image factory's nocloud qcow2 of talosVersion.
	ImageURL string `json:"imageUrl,omitempty" default:"the image factory's nocloud image of talosVersion"`
	// ImageSHA256 is the image's SHA-256 digest (hex, as sha256sum prints
	// it), which PVE checks after the download: required with an explicit
	// imageUrl.
	ImageSHA256 string `json:"imageSha256,omitempty"`
	// defaultImage is set when ImageURL is the derived factory URL.
	defaultImage bool
	// SnippetsDatastore holds each node's first machine config, the user
	// data of its nocloud drive; it must have the "snippets" content type.
	SnippetsDatastore string `json:"snippetsDatastore"`
	// SSH is how the provider uploads the snippets (over SSH, not the API).
	SSH *ProxmoxSSHConfig `json:"ssh"`
}

// ProxmoxSSHConfig is milner:substrate.proxmox.ssh. A private key is not
// here: it is the secret key milner:proxmoxSshPrivateKey (ProxmoxSSHKeyKey).
type ProxmoxSSHConfig struct {
	// Username is the SSH user on every host; it must be able to write the
	// snippets datastore's directory (root, or a user with sudo).
	Username string `json:"username"`
	// Agent authenticates with the SSH agent (SSH_AUTH_SOCK) instead of the
	// secret key milner:proxmoxSshPrivateKey.
	Agent bool `json:"agent,omitempty"`
}

// ProxmoxSSHKeyKey is the secret config key holding the unencrypted PEM
// private key the provider uploads snippets with, when ssh.agent is false.
const ProxmoxSSHKeyKey = "proxmoxSshPrivateKey"

// ProxmoxTokenKey is the secret config key holding the Proxmox VE API token
// (user@realm!tokenid=secret), read only when the substrate kind is proxmox.
const ProxmoxTokenKey = "proxmoxApiToken"

// NetworkConfig is milner:network.
type NetworkConfig struct {
	// Mode is nat (default, a workstation) or isolated (tests); libvirt only.
	Mode vocab.NetworkMode `json:"mode,omitempty" default:"nat"`
	// CIDR is the node network, e.g. 10.73.0.0/24.
	CIDR string `json:"cidr"`
	// Gateway is the default route; defaults to the first host address.
	Gateway string `json:"gateway,omitempty" default:"the first host address"`
	// Nameservers default to the gateway.
	Nameservers []string `json:"nameservers,omitempty" default:"the gateway"`
	// DHCPRange is the range handed to unknown MACs; nodes and VIPs stay outside it.
	DHCPRange *RangeConfig `json:"dhcpRange,omitempty"`
	// VIPRange is reserved for load-balancer VIPs (e.g. Cilium L2 announcements).
	VIPRange *RangeConfig `json:"vipRange,omitempty"`

	// Prefix, GatewayAddr and NameserverAddrs are the parsed values.
	Prefix          netip.Prefix `json:"-"`
	GatewayAddr     netip.Addr   `json:"-"`
	NameserverAddrs []netip.Addr `json:"-"`
}

// RangeConfig is an inclusive address range.
type RangeConfig struct {
	// Start is the first address of the range.
	Start string `json:"start"`
	// End is the last address of the range.
	End string `json:"end"`

	// From and To are Start and End, parsed.
	From, To netip.Addr `json:"-"`
}

// Contains reports whether a lies in the parsed range.
func (r *RangeConfig) Contains(a netip.Addr) bool {
	return r != nil && r.From.IsValid() && r.To.IsValid() && r.From.Compare(a) <= 0 && a.Compare(r.To) <= 0
}

// overlaps reports whether two parsed ranges share an address.
func (r *RangeConfig) overlaps(o *RangeConfig) bool {
	return r.Contains(o.From) || r.Contains(o.To) || o.Contains(r.From)
}

// NodeConfig is one entry of milner:nodes.
type NodeConfig struct {
	// Name is the node's logical name and hostname; a state contract.
	Name string `json:"name"`
	// Role is controlplane or worker.
	Role vocab.Role `json:"role"`
	// VCPU is the number of virtual CPUs (default 2).
	VCPU int `json:"vcpu" default:"2"`
	// MemoryMiB is the memory in MiB (default 2048, the Talos minimum).
	MemoryMiB int `json:"memoryMiB" default:"2048"`
	// OSDiskGiB is the OS disk size (default 20).
	OSDiskGiB int `json:"osDiskGiB" default:"20"`
	// DataDiskGiB is the persistent data disk size (default 20).
	DataDiskGiB int `json:"dataDiskGiB" default:"20"`
	// Address is the node's static IPv4 address.
	Address string `json:"address"`
	// MAC is the NIC address, stable across VM replaces.
	MAC string `json:"mac"`
	// VMID is the Proxmox VM id of the node (proxmox only).
	VMID int `json:"vmId,omitempty"`
	// AdoptID is the id of an existing VM (libvirt domain UUID, Proxmox VM id)
	// to import instead of create; see `milner adopt`.
	AdoptID string `json:"adoptId,omitempty"`
	// ProxmoxNode is the Proxmox host (PVE node) the node's VM and its disk
	// holder run on (proxmox only); defaults to substrate.proxmox.nodeName.
	// Changing it is a planned move, never a config edit (docs/proxmox.md "Move a
	// node to another host").
	ProxmoxNode string `json:"proxmoxNode,omitempty" default:"substrate.proxmox.nodeName"`
	// HolderAdoptID is the VM id of an existing disk holder to import
	// instead of create (proxmox only; it must be vmId + 1000).
	HolderAdoptID string `json:"holderAdoptId,omitempty"`

	// Addr is Address, parsed.
	Addr netip.Addr `json:"-"`
}

// AppConfig is one entry of milner:apps.
type AppConfig struct {
	// Name is the app's logical name and, unless ReleaseName says otherwise, its release name.
	Name string `json:"name"`
	// ReleaseName pins the Helm release name (default: Name).
	ReleaseName string `json:"releaseName,omitempty" default:"the app's name"`
	// Chart is the pinned chart.
	Chart ChartConfig `json:"chart"`
	// Namespace is the release namespace (default: Name).
	Namespace string `json:"namespace,omitempty" default:"the app's name"`
	// Values are the chart values.
	Values map[string]any `json:"values,omitempty"`
	// SecretValues maps a dotted value path to the milner: secret key holding it.
	SecretValues map[string]string `json:"secretValues,omitempty"`
	// RetainOnDelete keeps the release and its volumes when the app leaves the config.
	RetainOnDelete bool `json:"retainOnDelete,omitempty"`
	// PreviousNames are former logical names of the app, aliased on rename.
	PreviousNames []string `json:"previousNames,omitempty"`
	// PodSecurity is the Pod Security Standard the app's namespace enforces
	// (default baseline, Talos' cluster default).
	PodSecurity vocab.PodSecurityLevel `json:"podSecurity,omitempty" default:"baseline"`
	// PrivilegedAcknowledged must be true for PodSecurity privileged: the
	// namespace then admits pods that own their node (host paths, host
	// network, privileged containers).
	PrivilegedAcknowledged bool `json:"privilegedAcknowledged,omitempty"`
	// Vault makes the app Milner's hardened Vault; required for the vault chart.
	Vault *VaultConfig `json:"vault,omitempty"`
	// Woodpecker configures Woodpecker CI and its forge; required for the woodpecker chart.
	Woodpecker *WoodpeckerConfig `json:"woodpecker,omitempty"`
	// Expose gives the app a host name and a fixed load-balancer address
	// (Vault only; see ExposeConfig).
	Expose *ExposeConfig `json:"expose,omitempty"`
}

// ChartConfig pins one Helm chart: a chart of a repository (Repo, Name,
// Version) or a local chart directory (Path).
type ChartConfig struct {
	// Repo is an https:// chart repository or an oci:// registry path.
	Repo string `json:"repo"`
	// Name is the chart name.
	Name string `json:"name"`
	// Version is the exact chart version; ranges are refused.
	Version string `json:"version"`
	// Path is a local chart directory (holding Chart.yaml), e.g. a chart
	// vendored in the repository; relative to the project directory.
	// Exclusive with Repo, Name and Version: the chart's Chart.yaml names
	// and versions it (Load fills Name from it).
	Path string `json:"path,omitempty"`
}

// Layer names a layer of the graph, in bring-up order.
type Layer string

// The layers.
const (
	LayerSubstrate Layer = "substrate"
	LayerTalos     Layer = "talos"
	LayerApps      Layer = "apps"
)

// Layers lists the layers in bring-up order.
var Layers = []Layer{LayerSubstrate, LayerTalos, LayerApps}

// rank orders layers; an unknown layer ranks after all.
func (l Layer) rank() int {
	for i, x := range Layers {
		if x == l {
			return i
		}
	}
	return len(Layers)
}

// Includes reports whether a graph stopping after l declares layer x.
func (l Layer) Includes(x Layer) bool { return x.rank() <= l.rank() }

// Declares reports whether the stack declares layer x: x lies between
// startAt and stopAfter.
func (c *Config) Declares(x Layer) bool {
	return c.StartAt.rank() <= x.rank() && c.StopAfter.Includes(x)
}

// ConfigSource reads raw config values by full key (milner:nodes). It is
// what Load needs of a *pulumi.Context, so tools can validate a stack file
// without running the program.
type ConfigSource interface {
	GetConfig(key string) (string, bool)
	IsConfigSecret(key string) bool
}

// Load reads every milner: key once, decodes it strictly, applies defaults and
// validates the whole config. The error lists every problem at once, each
// naming its config path; no resource has been registered when it returns.
func Load(src ConfigSource) (*Config, error) {
	cfg := Config{dir: projectDir(src)}
	var p problems
	if raw, ok := src.GetConfig(Key("startAt")); ok {
		cfg.StartAt = Layer(raw)
	}
	if cfg.StartAt == LayerApps {
		decodeExistingCluster(src, &cfg, &p)
	} else {
		decodeKey(src, "cluster", &cfg.Cluster, &p)
		decodeKey(src, "substrate", &cfg.Substrate, &p)
		decodeKey(src, "network", &cfg.Network, &p)
		decodeList(src, "nodes", &cfg.Nodes, &p)
	}
	decodeList(src, "apps", &cfg.Apps, &p)
	decodeOptional(src, "storage", &cfg.Storage, &p)
	decodeOptional(src, "loadBalancer", &cfg.LoadBalancer, &p)
	decodeOptional(src, "chartMirrors", &cfg.ChartMirrors, &p)
	if decodeOptional(src, "workloads", &cfg.Workloads, &p) && cfg.Workloads == nil {
		p.addf(Key("workloads"), "is empty")
	}
	if raw, ok := src.GetConfig(Key("stopAfter")); ok {
		cfg.StopAfter = Layer(raw)
	}
	cfg.WaitForApps = true
	if raw, ok := src.GetConfig(Key("waitForApps")); ok {
		wait, err := strconv.ParseBool(raw)
		if err != nil {
			p.addf(Key("waitForApps"), "%q is not true or false", raw)
		}
		cfg.WaitForApps = wait
	}
	// What the stack holds beyond what it decodes into: no decoded value
	// depends on these, so validation goes on after them.
	var held problems
	checkKnownKeys(src, cfg.Apps, &held)
	checkPlainCredentials(src, cfg.Apps, &held)
	p.errs = append(held.errs, p.errs...)
	if len(p.errs) > len(held.errs) {
		return nil, p.err()
	}
	cfg.applyDefaults()
	cfg.validate(&p)
	for _, need := range AppsSecrets(src) {
		checkSecret(src, need.Key, need.NeededBy, &p)
	}
	checkVaultTLS(src, &cfg, time.Now(), &p)
	if cfg.Substrate.Kind == KindProxmox {
		checkProxmoxToken(src, &p)
		checkProxmoxSSHKey(src, cfg.Substrate.Proxmox, &p)
	}
	cfg.Warnings = p.warns
	if len(p.errs) > 0 {
		return nil, p.err()
	}
	return &cfg, nil
}

// checkSecret reports a secret key that is missing or empty (Pulumi.yaml
// declares secret keys with an empty default, so stacks that do not need
// them need not set them). One stored in plain text is checkPlainCredentials'
// (whether or not the stack needs it).
func checkSecret(src ConfigSource, k, neededBy string, p *problems) {
	full := Key(k)
	if v, ok := src.GetConfig(full); !ok || v == "" {
		p.addf(full, "secret is not set (needed by %s); run `pulumi config set --secret %s <value>`", neededBy, full)
	}
}

// Key returns the full config key of k: milner:<k>.
func Key(k string) string { return Namespace + ":" + k }

// lookup returns a milner: key's raw value, and whether it is set. Pulumi.yaml
// declares the object and list keys with an empty default (a declared key
// without one is required of every stack, even of one that does not use
// it, and the engine passes the default to the program): an empty object
// or list is "not set".
func lookup(src ConfigSource, k string) (string, bool) {
	raw, ok := src.GetConfig(Key(k))
	switch strings.TrimSpace(raw) {
	case "{}", "[]", "null":
		return "", false
	}
	return raw, ok
}

// decodeKey strictly decodes one object-valued key into v.
func decodeKey(src ConfigSource, k string, v any, p *problems) {
	raw, ok := lookup(src, k)
	if !ok {
		p.addf(Key(k), "is required")
		return
	}
	strictDecode(p, Key(k), []byte(raw), v)
}

// decodeOptional strictly decodes one object-valued key into v when it is
// set, and reports whether it was.
func decodeOptional(src ConfigSource, k string, v any, p *problems) bool {
	raw, ok := lookup(src, k)
	if !ok {
		return false
	}
	strictDecode(p, Key(k), []byte(raw), v)
	return true
}

// decodeList strictly decodes a list-valued key element by element, so every
// bad element is reported with its index.
func decodeList[T any](src ConfigSource, k string, out *[]T, p *problems) {
	raw, ok := lookup(src, k)
	if !ok {
		return
	}
	var items []json.RawMessage
	if err := json.Unmarshal([]byte(raw), &items); err != nil {
		p.addf(Key(k), "want a list: %v", err)
		return
	}
	for i, item := range items {
		var v T
		strictDecode(p, fmt.Sprintf("%s[%d]", Key(k), i), item, &v)
		*out = append(*out, v)
	}
}

// strictDecode decodes JSON into v, refusing unknown keys (a typo is an
// error, not a silently ignored setting) and keys that name a field in
// another case (exactkeys.go), each reported at its path under at.
func strictDecode(p *problems, at string, b []byte, v any) {
	if bad := exactKeys(b, reflect.TypeOf(v)); len(bad) > 0 {
		for _, k := range bad {
			p.addf(at+k.at, "%s", k.msg)
		}
		return
	}
	if err := decodeJSON(b, v); err != nil {
		p.addf(at, "%v", err)
	}
}

// decodeJSON decodes with DisallowUnknownFields, wording its errors.
func decodeJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	var typeErr *json.UnmarshalTypeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &typeErr):
		return fmt.Errorf("%s: want %s, got %s", typeErr.Field, typeErr.Type, typeErr.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return fmt.Errorf("unknown key %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
	default:
		return err
	}
}

// Defaults. Each is the one place its value is chosen.
const (
	DefaultVCPU        = 2
	DefaultMemoryMiB   = 2048
	DefaultOSDiskGiB   = 20
	DefaultDataDiskGiB = 20
	DefaultLibvirtURI  = "qemu:///system"
	// DefaultSchematic is the Talos image factory's schematic with no extensions.
	DefaultSchematic = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
)

// DefaultInstallImage is the upstream installer image of a Talos version.
func DefaultInstallImage(talosVersion string) string {
	return "ghcr.io/siderolabs/installer:" + talosVersion
}

// applyDefaults fills every unset optional value. Validation runs after, on
// the values the program will use.
func (c *Config) applyDefaults() {
	if c.StopAfter == "" {
		c.StopAfter = LayerApps
	}
	if c.StartAt == "" {
		c.StartAt = LayerSubstrate
	}
	c.applyAppsDefaults()
	c.applyLoadBalancerDefaults()
	if c.Cluster.OIDC != nil {
		c.Cluster.OIDC.applyOIDCDefaults()
	}
	if c.Cluster.InstallImage == "" {
		c.Cluster.InstallImage = DefaultInstallImage(c.Cluster.TalosVersion)
	}
	if lv := c.Substrate.Libvirt; lv != nil {
		if lv.URI == "" {
			lv.URI = DefaultLibvirtURI
		}
		if lv.DomainType == "" {
			lv.DomainType = "kvm"
		}
		if lv.CPUMode == "" {
			lv.CPUMode = DefaultCPUMode(lv.DomainType)
		}
		if lv.PoolPath == "" {
			lv.PoolPath = "/var/lib/libvirt/images/" + c.Cluster.Name
		}
		if lv.BootImage == "" {
			lv.defaultImage = true
			lv.BootImage = DefaultBootImage(c.Cluster.TalosVersion)
		}
	}
	if px := c.Substrate.Proxmox; px != nil {
		if px.DiskInterface == "" {
			px.DiskInterface = vocab.DiskVirtio
		}
		if px.ImageURL == "" {
			px.defaultImage = true
			// qcow2, not raw.gz: PVE's "import" content (API import, no SSH)
			// takes uncompressed images only.
			px.ImageURL = fmt.Sprintf("https://factory.talos.dev/image/%s/%s/nocloud-amd64.qcow2", DefaultSchematic, c.Cluster.TalosVersion)
		}
	}
	if c.Network.Mode == "" {
		c.Network.Mode = vocab.NetworkNAT
	}
	if c.Cluster.AllowSchedulingOnControlPlanes == nil {
		// With no worker, control planes are the only place a pod can run.
		noWorker := !slices.ContainsFunc(c.Nodes, func(n NodeConfig) bool { return n.Role == vocab.RoleWorker })
		c.Cluster.AllowSchedulingOnControlPlanes = &noWorker
		c.Cluster.defaultScheduling = true
	}
	for i := range c.Nodes {
		n := &c.Nodes[i]
		if n.VCPU == 0 {
			n.VCPU = DefaultVCPU
		}
		if n.MemoryMiB == 0 {
			n.MemoryMiB = DefaultMemoryMiB
		}
		if n.OSDiskGiB == 0 {
			n.OSDiskGiB = DefaultOSDiskGiB
		}
		if n.DataDiskGiB == 0 {
			n.DataDiskGiB = DefaultDataDiskGiB
		}
		n.MAC = normalizeMAC(n.MAC)
		if px := c.Substrate.Proxmox; px != nil && n.ProxmoxNode == "" {
			n.ProxmoxNode = px.NodeName
		}
	}
	for i := range c.Apps {
		a := &c.Apps[i]
		if a.ReleaseName == "" {
			a.ReleaseName = a.Name
		}
		if a.Namespace == "" {
			a.Namespace = a.Name
		}
	}
}

// Endpoint is the Kubernetes API URL of the cluster.
func (c *Config) Endpoint() string {
	if c.Cluster.Endpoint != "" {
		return c.Cluster.Endpoint
	}
	return "https://" + netip.AddrPortFrom(c.Cluster.VIPAddr, 6443).String()
}

// problems collects every validation problem, each prefixed by its config path.
type problems struct {
	errs, warns []string
}

func (p *problems) addf(path, format string, args ...any) {
	p.errs = append(p.errs, path+": "+fmt.Sprintf(format, args...))
}

func (p *problems) warnf(path, format string, args ...any) {
	p.warns = append(p.warns, path+": "+fmt.Sprintf(format, args...))
}

// ConfigError is the error Load returns: every problem of the stack config.
type ConfigError struct {
	// Problems are the problems, each starting with its config path.
	Problems []string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("invalid stack config (%d problems):\n  - %s", len(e.Problems), strings.Join(e.Problems, "\n  - "))
}

func (p *problems) err() error { return &ConfigError{Problems: p.errs} }

// parseMAC parses a 6-byte hardware address.
func parseMAC(s string) (net.HardwareAddr, error) {
	mac, err := net.ParseMAC(s)
	if err == nil && len(mac) != 6 {
		err = fmt.Errorf("want 6 bytes, got %d", len(mac))
	}
	return mac, err
}
