package config

// Inputs a careful user could still give and that would hurt: read as an
// attacker and as a tired operator would (issue #24 item 7). Each is
// refused before anything is touched, naming its config path and the fix.

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
)

// foreignDirs are directories other software owns on a hypervisor host: a
// storage pool there (libvirt creates, chmods and deletes a dir pool's
// target) would take their data with it.
var foreignDirs = []string{
	"/var/lib/docker", "/var/lib/containerd", "/var/lib/kubelet", "/var/lib/etcd",
	"/var/lib/postgresql", "/var/lib/mysql", "/var/lib/lxc", "/var/lib/lxd", "/var/lib/vz",
	"/var/lib/libvirt/qemu", "/var/lib/libvirt/boot", "/var/lib/libvirt/dnsmasq",
	"/var/log", "/var/cache", "/var/spool", "/var/mail", "/var/backups", "/var/run", "/var/lock",
}

// kernelTrees hold devices and kernel files, never a boot image.
var kernelTrees = []string{"/dev", "/proc", "/sys", "/run"}

// systemNamespaces are Kubernetes' own namespaces: an app there shares
// them with the control plane's objects (PodSecurity, quotas, RBAC), and
// a release deleted there could take cluster components with it.
var systemNamespaces = []string{"kube-system", "kube-public", "kube-node-lease", "default"}

// credentialKeys are secret keys that hold a credential of the hypervisor
// or of the cluster itself: mapped into an app's values, they would land
// in the Helm release record (a Secret any namespace admin reads) and in
// the pods of that app.
var credentialKeys = []string{"proxmoxApiToken", "proxmoxSshPrivateKey", "kubeconfig"}

// pveID is what Proxmox accepts as a storage, bridge or node name
// (pve-storage-id, a Linux interface name, a hostname): no ',', '=' or ';',
// which Proxmox's property strings (e.g. net0: "virtio,bridge=vmbr0,tag=20")
// would read as more properties.
var pveID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

// imageRef is a container image reference: repository, then a tag, a
// digest, or both.
var imageRef = regexp.MustCompile(`^([a-z0-9.-]+(:[0-9]+)?/)?[a-z0-9._/-]+(:[A-Za-z0-9._-]+)?(@sha256:[0-9a-f]{64})?$`)

// validateHostile runs the checks of this file; validateInput calls it.
func (c *Config) validateHostile(p *problems) {
	if c.StartAt != LayerApps {
		c.checkVIPNotNetworkEdge(p)
		c.checkInstallImage(p)
	}
	if lv := c.Substrate.Libvirt; lv != nil {
		sp := Key("substrate") + ".libvirt"
		checkForeignDir(p, sp+".poolPath", lv.PoolPath)
		if img := lv.BootImage; strings.HasPrefix(img, "/") && inAny(img, kernelTrees) {
			p.addf(sp+".bootImage", "%q is a device or kernel file, not a boot image; give the path of the image file", img)
		}
	}
	if px := c.Substrate.Proxmox; px != nil {
		names := map[string]string{
			"nodeName": px.NodeName, "osDatastore": px.OSDatastore, "dataDatastore": px.DataDatastore,
			"imageDatastore": px.ImageDatastore, "bridge": px.Bridge, "snippetsDatastore": px.SnippetsDatastore,
		}
		for _, f := range sortedKeys(names) {
			if v := names[f]; v != "" && !pveID.MatchString(v) {
				p.addf(Key("substrate")+".proxmox."+f, "%q is not a Proxmox name (letters, digits, '.', '_', '-'); ',', '=' and ';' would add properties to the VM's config (e.g. a VLAN tag belongs in the network, not in the bridge name)", v)
			}
		}
	}
	if s := c.Storage; s.On() && strings.HasPrefix(s.Path, "/var/") && !strings.Contains(s.Path, "..") && !inAny(path.Clean(s.Path), []string{DataMountpoint}) {
		p.addf(Key("storage")+".path", "%q is off the data disk: volumes there land in the OS disk's EPHEMERAL partition, which a Talos upgrade or reset wipes; use a directory under %s", s.Path, DataMountpoint)
	}
	if s := c.Storage; s.On() && slices.Contains(systemNamespaces, s.Namespace) {
		p.addf(Key("storage")+".namespace", "%q is a Kubernetes system namespace; give the provisioner one of its own (default %s)", s.Namespace, DefaultStorageNamespace)
	}
	for i, a := range c.Apps {
		ap := fmt.Sprintf("%s[%d]", Key("apps"), i)
		for _, vp := range sortedKeys(a.SecretValues) {
			if k := a.SecretValues[vp]; slices.Contains(credentialKeys, k) {
				p.addf(fmt.Sprintf("%s.secretValues[%s]", ap, vp), "maps %s:%s, a credential of the hypervisor or the cluster, into the app's values (and its Helm release record); give the app a credential of its own", Namespace, k)
			}
		}
	}
}

// checkVIPNotNetworkEdge refuses a VIP that is the node network's network
// or broadcast address (node addresses and ranges already refuse them).
func (c *Config) checkVIPNotNetworkEdge(p *problems) {
	vip, prefix := c.Cluster.VIPAddr, c.Network.Prefix
	if vip.IsValid() && prefix.IsValid() && (vip == prefix.Masked().Addr() || vip == lastAddr(prefix)) {
		p.addf(Key("cluster.vip"), "%s is the network or broadcast address of %s; pick a free host address", vip, prefix)
	}
}

// checkInstallImage pins the installer: the image Talos installs and
// upgrades to must be the declared Talos version's tag, or a digest. A
// floating tag (latest, a branch) can change under a node between two
// installs, and the installer receives the node's machine config and keys.
func (c *Config) checkInstallImage(p *problems) {
	img := c.Cluster.InstallImage
	at := Key("cluster.installImage")
	if !imageRef.MatchString(img) {
		p.addf(at, "%q is not an image reference (registry/repository:tag or @sha256:<digest>)", img)
		return
	}
	if strings.Contains(img, "@sha256:") {
		return
	}
	repo, tag := img, ""
	if i := strings.LastIndex(img, ":"); i > strings.LastIndex(img, "/") {
		repo, tag = img[:i], img[i+1:]
	}
	if tag != c.Cluster.TalosVersion {
		p.addf(at, "%q is not pinned: use the tag of talosVersion (%s:%s) or a digest (%s@sha256:...)", img, repo, c.Cluster.TalosVersion, repo)
	}
}

// checkForeignDir refuses a pool directory that is, or lies in, another
// system's directory, or that is a user's home itself.
func checkForeignDir(p *problems, at, dir string) {
	if !strings.HasPrefix(dir, "/") || path.Clean(dir) != dir {
		return // validate_input.go reports it.
	}
	if d, ok := strings.CutPrefix(dir, "/home/"); ok && !strings.Contains(d, "/") {
		p.addf(at, "%q is a user's home; a pool owns and deletes its directory, so give it one of its own (e.g. %s/milner-pool)", dir, dir)
		return
	}
	for _, f := range foreignDirs {
		if dir == f || strings.HasPrefix(dir, f+"/") {
			p.addf(at, "%q is inside %s, which other software owns; give the pool a directory of its own (e.g. /var/lib/milner/<cluster>)", dir, f)
			return
		}
	}
}

// inAny reports whether p is one of roots or lies under one.
func inAny(p string, roots []string) bool {
	for _, r := range roots {
		if p == r || strings.HasPrefix(p, r+"/") {
			return true
		}
	}
	return false
}
