package substrate

// The Proxmox VE substrate. Logical names created here are a state contract:
//   - "<cluster>" (the component) and "<cluster>-proxmox" (its provider);
//   - "<cluster>-<node>-disks": the never-started holder VM that owns the
//     node's OS and data disks. A rename plans its delete, which Protect refuses;
//   - "<cluster>-<node>-userdata": the node's first machine config, a
//     snippet on its host (only when the stack passes user data);
//   - "<cluster>-<node>": the node VM, the one disposable resource. A rename
//     replaces the node VM (its disks survive);
//   - "<cluster>-<host>-image-<talosVersion>": one Talos image per Proxmox
//     host that runs a node, and per version (formerly, on one host,
//     "<cluster>-image-<talosVersion>": the default host's image carries that
//     name as an alias). A new name downloads a new image; the old one is
//     retained on the datastore.
// The Proxmox VM ids (nodes[i].vmId for node VMs, vmId+vocab.HolderVMIDOffset for
// holders) and VM names are the same kind of contract with the Proxmox host.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"github.com/milner/milner/components/vocab"
	"net/netip"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/milner/milner/components/lifecycle"
	"github.com/muhlba91/pulumi-proxmoxve/sdk/v7/go/proxmoxve"
	"github.com/muhlba91/pulumi-proxmoxve/sdk/v7/go/proxmoxve/download"
	"github.com/muhlba91/pulumi-proxmoxve/sdk/v7/go/proxmoxve/storage"
	"github.com/muhlba91/pulumi-proxmoxve/sdk/v7/go/proxmoxve/vm"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// ProxmoxType is the type token of the Proxmox substrate component. It is
// part of every child's URN: changing it orphans the whole substrate in state.
const ProxmoxType = "milner:components:ProxmoxSubstrate"

// proxmoxDiskSpeeds are both disks' speed blocks, ignored on both VMs:
// bpg gives disks[].speed a default of zero limits (proxmoxtf/resource/vm/
// disk/schema.go, mkDiskSpeed DefaultFunc), which the Pulumi bridge fills
// into the inputs, while bpg's read sets it to an empty list when PVE's
// drive string carries no iops/mbps option (disk.go Read), as it never
// does for a disk made without limits. Without this every preview after a
// create plans an update of each holder and, through ReplaceOnChanges, a
// replace of every node VM: seen on the real plugin against the PVE double
// (tests/pveengine); upstream muhlba91/pulumi-proxmoxve#664. By index: the
// bridge does not honour "disks[*].speed" (tried; pulumi-proxmoxve#514).
// Milner sets no disk limits.
var proxmoxDiskSpeeds = []string{"disks[0].speed", "disks[1].speed"}

// proxmoxNoCDROM is both VMs' CD-ROM drive: empty ("none", bpg's
// documented way to leave it empty). bpg's default is "cdrom", the host's
// physical drive (proxmoxtf/resource/vm/vm.go vmCreateCustom: an empty
// file_id becomes "cdrom"), which PVE keeps as "ide3: cdrom,media=cdrom"
// (qemu-server API2/Qemu.pm $create_disks, print_drive). bpg's import then
// reads that drive as a disk: disk.Read skips only "none" and the VM's own
// cloud-init volume (proxmoxtf/resource/vm/disk/disk.go Read, the
// FileVolume == "none" and IsCloudInitDrive checks), and with no disks in
// the prior state it keeps every drive it found (OrderedListFromMap), so
// the imported disks start with ide3 and a node VM pairs its virtio0 with
// the holder's ide3 (seen through the real plugin: the import planned a
// replace). An empty drive is skipped, and the cdrom reader reads "none"
// back (vm.go vmReadCustom, cdromBlock file_id = FileVolume), equal to this.
func proxmoxNoCDROM() *vm.VirtualMachineCdromArgs {
	return &vm.VirtualMachineCdromArgs{FileId: pulumi.String("none")}
}

// proxmoxCDROMIgnored keeps VMs created before proxmoxNoCDROM as they are:
// their state holds bpg's default file_id "" (vm.go vmReadCustom keeps ""
// while the prior state has it), which against "none" would update every
// holder and replace every node VM. Such a VM keeps the host's drive on
// ide3 and cannot be adopted by import until that drive is emptied
// (docs/runbooks/adopt.md).
const proxmoxCDROMIgnored = "cdrom"

// ProxmoxHolderIgnoredChanges lists the holder VM inputs ignored after
// creation: the OS disk's source image only seeds a new disk, so a Talos
// version or image bump never touches (or tries to replace) an existing OS
// disk; running nodes upgrade in place through Talos. And the disks'
// speed blocks (proxmoxDiskSpeeds) and the CD-ROM drive (proxmoxCDROMIgnored).
var ProxmoxHolderIgnoredChanges = append([]string{"disks[0].importFrom", proxmoxCDROMIgnored}, proxmoxDiskSpeeds...)

// ProxmoxNodeImportUnread and ProxmoxHolderImportUnread are the VM inputs
// bpg v0.95.0's import cannot read back as the program declares them,
// ignored on an adopted VM only (one whose state began as an import; a VM
// Milner created holds them in state from its inputs, which bpg's read
// keeps). With no prior state, vmReadCustom (proxmoxtf/resource/vm/vm.go)
// sets the agent, cpu, memory and operating_system blocks only when PVE's
// values differ from bpg's defaults ("len(currentAgent) > 0 ||
// agent[mkAgentEnabled] != dvAgentEnabled || ...", and likewise per
// block), the watchdog block to an empty list when the VM has no watchdog
// device, and never reads hook_script_file_id (vmReadPrimitiveValues has
// no d.Set of it; added upstream after v0.95.0, bpg#2921). The Pulumi
// bridge fills each block's DefaultFunc into the inputs, so the import of
// a VM holding exactly those defaults diffs them against nothing: an
// update of the holder and, through ReplaceOnChanges, a replace of the
// node VM, which adopt-replaces-nothing refuses (seen through the real
// plugin, tests/pveengine). Applying the update instead is no way out for
// the node VM: bpg's vmUpdate marks an agent change rebootRequired, and
// with reboot_after_update's default true it stops and starts a running
// VM without a guest agent (vmUpdateDiskLocationAndSize, vmStop); the
// holder's update would be harmless (never started) but is not needed.
// Each list names the blocks that VM declares at bpg's defaults: the node
// VM sets its cpu, memory and operating system, which the import reads.
// What this leaves unchecked on an adopted VM is listed in
// docs/runbooks/adopt.md.
var (
	ProxmoxNodeImportUnread   = []string{"agent", "watchdog", "hookScriptFileId"}
	ProxmoxHolderImportUnread = []string{"agent", "cpu", "memory", "operatingSystem", "watchdog", "hookScriptFileId"}
)

// ProxmoxNodeIgnoredChanges lists the node VM inputs ignored after creation:
// the user-data snippet only seeds a new node. bpg marks
// initialization.user_data_file_id ForceNew (proxmoxtf/resource/vm/vm.go,
// mkInitializationUserDataFileID), and the node VM replaces on any change,
// so without this a stack whose VMs predate the snippet, or a moved
// snippets datastore, would replace every node VM. A VM created later (a
// new node, a replace) takes the current id: the id is read on create.
// It also ignores the disks' speed blocks (proxmoxDiskSpeeds).
// And the CD-ROM drive (proxmoxCDROMIgnored).
var ProxmoxNodeIgnoredChanges = append([]string{"initialization.userDataFileId", proxmoxCDROMIgnored}, proxmoxDiskSpeeds...)

// ProxmoxArgs configures a Proxmox VE substrate.
type ProxmoxArgs struct {
	// Endpoint is the Proxmox VE API URL, e.g. https://pve.lan:8006/.
	Endpoint string
	// Insecure skips TLS verification of the API.
	Insecure bool
	// APIToken is the API token (user@realm!id=secret), a secret.
	APIToken pulumi.StringInput
	// NodeName is the stack's default Proxmox host; the image downloaded to
	// it keeps the alias of the single-host image name.
	NodeName string
	// OSDatastore holds the OS disks and the cloud-init drives.
	OSDatastore string
	// DataDatastore holds the holder VMs' data disks.
	DataDatastore string
	// ImageDatastore holds the Talos images; it must allow content type "import".
	ImageDatastore string
	// Bridge is the Linux bridge the node NICs attach to.
	Bridge string
	// DiskInterface is the bus of both disks of a node VM.
	DiskInterface vocab.DiskInterface
	// ImageURL is the uncompressed Talos nocloud disk image to download.
	ImageURL string
	// ImageSHA256 is the image's SHA-256 digest; "" downloads it unchecked.
	ImageSHA256 string
	// TalosVersion names the image, so a version bump adds an image.
	TalosVersion string
	// Prefix is the node network, giving the address's prefix length.
	Prefix netip.Prefix
	// Gateway is the default route handed to nodes at first boot.
	Gateway netip.Addr
	// Nameservers are handed to nodes at first boot.
	Nameservers []netip.Addr
	// Nodes are the nodes to create, in config order.
	Nodes []NodeSpec
	// UserData, by node name, is the node's first machine config (a
	// secret), delivered through the nocloud drive instead of the LAN.
	// Optional: a node without one boots to maintenance mode as before.
	UserData map[string]pulumi.StringInput
	// SnippetsDatastore holds the user-data snippets; it must allow content
	// type "snippets". Required when UserData is set.
	SnippetsDatastore string
	// SSH is how the provider reaches the hosts to upload the snippets
	// (bpg uploads them over SSH, not the API). Required when UserData is set.
	SSH *ProxmoxSSH
	// Hooks are the run's lifecycle hooks: each disk holder is bound to
	// lifecycle.KeepPersistent (the images and snippets are retained on
	// delete instead: their delete only leaves state).
	Hooks *lifecycle.Hooks
}

// ProxmoxSSH is the provider's SSH access to the Proxmox hosts.
type ProxmoxSSH struct {
	// Username is the SSH user on every host; it must be able to write the
	// snippets datastore's directory (root, or a user with sudo).
	Username string
	// Agent authenticates with the SSH agent (SSH_AUTH_SOCK).
	Agent bool
	// PrivateKey, when set, is the unencrypted PEM private key (a secret).
	PrivateKey pulumi.StringPtrInput
}

// Proxmox is a substrate of Proxmox VE VMs spread over the hosts of one
// Proxmox VE cluster.
type Proxmox struct {
	pulumi.ResourceState

	// ImageIDs are the Proxmox file ids of the current Talos image, by host.
	ImageIDs map[string]pulumi.IDOutput

	nodes []Node
}

var _ Substrate = (*Proxmox)(nil)

// Nodes returns the facts of every node, in config order.
func (p *Proxmox) Nodes() []Node { return p.nodes }

// NewProxmox creates the Talos image, and per node a protected holder VM
// owning the disks and a disposable node VM attaching them. name is the
// cluster name; every Proxmox object is named after it.
func NewProxmox(ctx *pulumi.Context, name string, args *ProxmoxArgs, opts ...pulumi.ResourceOption) (*Proxmox, error) {
	if len(args.UserData) > 0 && (args.SnippetsDatastore == "" || args.SSH == nil) {
		return nil, fmt.Errorf("proxmox substrate %q: user data needs a snippets datastore and SSH access to the hosts", name)
	}
	p := &Proxmox{}
	if err := ctx.RegisterComponentResource(ProxmoxType, name, p, opts...); err != nil {
		return nil, err
	}
	provArgs := &proxmoxve.ProviderArgs{
		Endpoint: pulumi.String(args.Endpoint),
		Insecure: pulumi.Bool(args.Insecure),
		ApiToken: args.APIToken,
	}
	if s := args.SSH; s != nil {
		// Only the snippet upload uses it (storage.File docs: "uses SSH
		// access to the node"); the provider finds each host's address
		// through the API.
		provArgs.Ssh = &proxmoxve.ProviderSshArgs{
			Username:   pulumi.String(s.Username),
			Agent:      pulumi.Bool(s.Agent),
			PrivateKey: s.PrivateKey,
		}
	}
	prov, err := proxmoxve.NewProvider(ctx, name+"-proxmox", provArgs, pulumi.Parent(p))
	if err != nil {
		return nil, fmt.Errorf("proxmox substrate %q: provider: %w", name, err)
	}
	child := []pulumi.ResourceOption{pulumi.Parent(p), pulumi.Provider(prov)}

	images, err := newProxmoxImages(ctx, name, args, child)
	if err != nil {
		return nil, err
	}
	p.ImageIDs = map[string]pulumi.IDOutput{}
	for host, img := range images {
		p.ImageIDs[host] = img.ID()
	}

	for _, spec := range args.Nodes {
		n, err := newProxmoxNode(ctx, name, spec, args, images[spec.Host], child)
		if err != nil {
			return nil, fmt.Errorf("proxmox substrate %q: node %q: %w", name, spec.Name, err)
		}
		p.nodes = append(p.nodes, n)
	}

	outputs := pulumi.Map{}
	for host, id := range p.ImageIDs {
		outputs[host+"ImageId"] = id
	}
	for _, n := range p.nodes {
		outputs[n.Name+"VmId"] = n.MachineID
	}
	if err := ctx.RegisterResourceOutputs(p, outputs); err != nil {
		return nil, err
	}
	return p, nil
}

// newProxmoxNode creates one node's holder VM, owning its OS and data disks,
// and its node VM, attaching them.
func newProxmoxNode(ctx *pulumi.Context, cluster string, spec NodeSpec, args *ProxmoxArgs,
	image *download.File, child []pulumi.ResourceOption,
) (Node, error) {
	base := cluster + "-" + spec.Name

	// The holder is never started: it only owns the node's disks, so that
	// they are not the node VM's and survive its replacement (bpg's
	// "attached disks" pattern). Both disks, not only the data disk: Talos
	// keeps its machine config and etcd's data on the install disk, so a
	// node VM replaced with a fresh OS disk would come back unconfigured and
	// as a stranger to etcd (and a change to every node VM at once would
	// lose etcd). Kept this way, a replace is a reboot on the same disks, as
	// with libvirt's separate volumes.
	// Protected twice: by the engine, so no plan deletes or replaces it, and
	// by Proxmox, so no one removes it or its disks by hand. Its disks sit
	// on scsi0/scsi1 whatever the node's bus, so a change of bus never
	// touches the holder.
	// On the node VM's own host: a VM can only attach volumes of storage
	// its host reaches, and a local datastore (local-lvm) is per host. No
	// "migrate": a host change is then a replace (bpg docs/guides/
	// multi-node.md: "By default, changing a guest's node_name forces
	// Terraform to destroy and recreate it"), which Protect and the gate
	// refuse, so a move happens only as the planned procedure (docs/proxmox.md).
	holderIgnored := ProxmoxHolderIgnoredChanges
	var holderImport []pulumi.ResourceOption
	if spec.HolderAdoptID != "" {
		// Config validation holds holderAdoptId to vmId + vocab.HolderVMIDOffset.
		holderImport = append(holderImport, pulumi.Import(pulumi.ID(ProxmoxImportID(spec.Host, vocab.HolderVMID(spec.VMID)))))
		holderIgnored = slices.Concat(holderIgnored, ProxmoxHolderImportUnread)
	}
	holderOpts := append(slices.Clone(child), pulumi.Protect(true), args.Hooks.Persistent(), pulumi.IgnoreChanges(holderIgnored))
	holderOpts = append(holderOpts, holderImport...)
	holder, err := vm.NewVirtualMachine(ctx, base+vocab.HolderSuffix, &vm.VirtualMachineArgs{
		NodeName:    pulumi.String(spec.Host),
		VmId:        pulumi.Int(vocab.HolderVMID(spec.VMID)),
		Name:        pulumi.String(base + vocab.HolderSuffix),
		Description: pulumi.String("Milner: holds the disks of " + base + ", which attaches them. Never start it."),
		Started:     pulumi.Bool(false),
		OnBoot:      pulumi.Bool(false),
		Protection:  pulumi.Bool(true),
		Cdrom:       proxmoxNoCDROM(),
		Disks: vm.VirtualMachineDiskArray{
			// The OS disk, imported from the Talos image through the API.
			&vm.VirtualMachineDiskArgs{
				Interface:   pulumi.String("scsi0"),
				DatastoreId: pulumi.String(args.OSDatastore),
				ImportFrom:  image.ID(),
				Size:        pulumi.Int(spec.OSDiskGiB),
				FileFormat:  pulumi.String("raw"),
			},
			&vm.VirtualMachineDiskArgs{
				Interface:   pulumi.String("scsi1"),
				DatastoreId: pulumi.String(args.DataDatastore),
				Size:        pulumi.Int(spec.DataDiskGiB),
				FileFormat:  pulumi.String("raw"),
			},
		},
	}, holderOpts...)
	if err != nil {
		return Node{}, fmt.Errorf("disk holder: %w", err)
	}
	// The node VM attaches the holder's disks by their path, in order: the
	// OS disk as <bus>0, the data disk as <bus>1. Never resized or moved
	// through the node VM (resize the holder, see docs/proxmox.md).
	bus := args.DiskInterface
	var disks vm.VirtualMachineDiskArray
	for i := range 2 {
		d := holder.Disks.Index(pulumi.Int(i))
		disks = append(disks, &vm.VirtualMachineDiskArgs{
			Interface:       pulumi.String(fmt.Sprintf("%s%d", bus, i)),
			DatastoreId:     d.DatastoreId(),
			PathInDatastore: d.PathInDatastore(),
			FileFormat:      d.FileFormat(),
			Size:            d.Size(),
		})
	}

	userData, err := newProxmoxUserData(ctx, base, spec, args, child)
	if err != nil {
		return Node{}, err
	}

	installDisk, dataDisk := bus.Devices()
	nameservers := pulumi.StringArray{}
	for _, ns := range args.Nameservers {
		nameservers = append(nameservers, pulumi.String(ns.String()))
	}

	// The node VM is the one disposable resource: any change to it is
	// honestly a recreation, and the old VM must be gone before the new one
	// takes its id, MAC and disks (one disk must never be attached to two
	// running VMs).
	nodeIgnored := ProxmoxNodeIgnoredChanges
	var nodeImport []pulumi.ResourceOption
	if spec.AdoptID != "" {
		// Config validation holds adoptId to the node's vmId: the import
		// must not plan a replace, which the engine refuses on import.
		nodeImport = append(nodeImport, pulumi.Import(pulumi.ID(ProxmoxImportID(spec.Host, spec.VMID))))
		nodeIgnored = slices.Concat(nodeIgnored, ProxmoxNodeImportUnread)
	}
	vmOpts := append(slices.Clone(child),
		pulumi.ReplaceOnChanges([]string{"*"}),
		pulumi.DeleteBeforeReplace(true),
		pulumi.IgnoreChanges(nodeIgnored),
	)
	vmOpts = append(vmOpts, nodeImport...)
	node, err := vm.NewVirtualMachine(ctx, base, &vm.VirtualMachineArgs{
		NodeName: pulumi.String(spec.Host),
		VmId:     pulumi.Int(spec.VMID),
		Name:     pulumi.String(base),
		Started:  pulumi.Bool(true),
		OnBoot:   pulumi.Bool(true),
		// Talos needs x86-64-v2; a named model, unlike "host", keeps the VM
		// portable across hosts.
		Cpu:             &vm.VirtualMachineCpuArgs{Cores: pulumi.Int(spec.VCPU), Type: pulumi.String("x86-64-v2-AES")},
		Memory:          &vm.VirtualMachineMemoryArgs{Dedicated: pulumi.Int(spec.MemoryMiB)},
		OperatingSystem: &vm.VirtualMachineOperatingSystemArgs{Type: pulumi.String("l26")},
		// The vanilla Talos image has no guest agent; Proxmox would wait for it.
		Agent:      &vm.VirtualMachineAgentArgs{Enabled: pulumi.Bool(false)},
		Cdrom:      proxmoxNoCDROM(),
		Disks:      disks,
		BootOrders: pulumi.StringArray{pulumi.String(string(bus) + "0")},
		NetworkDevices: vm.VirtualMachineNetworkDeviceArray{
			&vm.VirtualMachineNetworkDeviceArgs{
				Bridge: pulumi.String(args.Bridge),
				Model:  pulumi.String("virtio"),
				// Proxmox reports MACs in upper case; so must the input, or
				// every refresh would plan a replace.
				MacAddress: pulumi.String(strings.ToUpper(spec.MAC)),
			},
		},
		// The first-boot address, through the nocloud drive: Talos'
		// maintenance mode takes it, so the machine config is applied to
		// the node's own static address with no DHCP assumption. The machine
		// config then sets the same address for good.
		Initialization: &vm.VirtualMachineInitializationArgs{
			DatastoreId: pulumi.String(args.OSDatastore),
			IpConfigs: vm.VirtualMachineInitializationIpConfigArray{
				&vm.VirtualMachineInitializationIpConfigArgs{
					Ipv4: &vm.VirtualMachineInitializationIpConfigIpv4Args{
						Address: pulumi.String(netip.PrefixFrom(spec.Address, args.Prefix.Bits()).String()),
						Gateway: pulumi.String(args.Gateway.String()),
					},
				},
			},
			Dns:            &vm.VirtualMachineInitializationDnsArgs{Servers: nameservers},
			UserDataFileId: userData,
		},
		SerialDevices: vm.VirtualMachineSerialDeviceArray{
			&vm.VirtualMachineSerialDeviceArgs{Device: pulumi.String("socket")},
		},
	}, vmOpts...)
	if err != nil {
		return Node{}, fmt.Errorf("vm: %w", err)
	}
	return Node{
		Name:        spec.Name,
		Role:        spec.Role,
		Address:     spec.Address,
		InstallDisk: installDisk,
		DataDisk:    dataDisk,
		MachineID:   node.ID(),
		VM:          node,
	}, nil
}

// snippetMode is the file mode of a node's first-config snippet.
const snippetMode = "0600"

// newProxmoxUserData uploads a node's first machine config as a snippet on
// its host, for the node VM's nocloud drive, or returns nil when the node
// has none. Talos' nocloud platform takes the drive's user-data as its
// machine config (talos v1.11.5 internal/app/machined/pkg/runtime/v1alpha1/
// platform/nocloud, Nocloud.Configuration: anything but "#cloud-config" or
// "#include" is the config), so the config, with the cluster's CA keys,
// never crosses the LAN unauthenticated.
//
// bpg uploads snippets over SSH, not the API (storage.File docs: "The
// resource with this content type uses SSH access to the node"; PVE's
// upload API takes iso, vztmpl and import only), so the provider needs its
// ssh settings (ProxmoxArgs.SSH) when this is used.
//
// The snippet's content is ignored after creation: it only seeds a new
// node. Talos reads the STATE partition's config before any platform source
// (talos v1.11.5 internal/app/machined/pkg/controllers/config/acquire.go,
// AcquireController.stateDisk), so a node that has booted once, or a
// replaced node VM on its kept disks, never reads it again; later changes
// go through the authenticated Talos API. The file is kept, not deleted
// after the first boot: PVE rebuilds the nocloud drive from it at every VM
// start (qemu-server PVE::QemuServer::Cloudinit, apply_cloudinit_config ->
// read_cloudinit_snippets_file, which dies on a missing file), so deleting
// it would leave the node VM unable to start; for the same reason the
// file is retained when it leaves the program or is replaced.
func newProxmoxUserData(ctx *pulumi.Context, base string, spec NodeSpec, args *ProxmoxArgs, child []pulumi.ResourceOption) (pulumi.StringPtrInput, error) {
	data, ok := args.UserData[spec.Name]
	if !ok {
		return nil, nil
	}
	f, err := storage.NewFile(ctx, base+"-userdata", &storage.FileArgs{
		NodeName:    pulumi.String(spec.Host),
		DatastoreId: pulumi.String(args.SnippetsDatastore),
		ContentType: pulumi.String("snippets"),
		SourceRaw: &storage.FileSourceRawArgs{
			Data:     pulumi.ToSecret(data.ToStringOutput()).(pulumi.StringOutput),
			FileName: pulumi.String(base + "-talos.yaml"),
		},
		// The snippet holds the node's machine config with the cluster's CA
		// keys: readable by its owner only. bpg chmods the file over SFTP
		// right after the upload (proxmox/ssh/client.go uploadFile:
		// sftpClient.Chmod), so the mode needs the SSH user, not root@pam
		// in the API. fileMode is ForceNew in bpg: an existing snippet
		// keeps the mode it was written with (chmod 600 it by hand,
		// docs/proxmox.md) rather than be rewritten.
		FileMode: pulumi.String(snippetMode),
	}, append(slices.Clone(child),
		pulumi.IgnoreChanges([]string{"sourceRaw", "fileMode"}),
		// Retained, never deleted by a plan: the node VM ignores a changed
		// id, so after a new snippets datastore (a replace of this file)
		// it still names the old file, and PVE reads that file at every
		// start. A node that leaves the program leaves its file too
		// (prune by hand, as images).
		pulumi.RetainOnDelete(true),
	)...)
	if err != nil {
		return nil, fmt.Errorf("user data: %w", err)
	}
	return f.ID().ToStringOutput(), nil
}

// newProxmoxImages downloads the Talos image once to every host that runs a
// node (a download is node-scoped: bpg docs/guides/multi-node.md, "one
// resource instance per node"), and returns them by host.
//
// Retained on delete rather than protected: a version bump drops the old
// image from the program, which Protect would turn into a failed update;
// RetainOnDelete lets it leave state and never deletes a file from the host
// (prune old images by hand). The file name carries a hash of the URL, so a
// new URL (another schematic) is a new file, never an overwrite of one in
// use. imageDatastore must be host-local (e.g. "local"): on shared storage
// the hosts' downloads would be one file.
func newProxmoxImages(ctx *pulumi.Context, name string, args *ProxmoxArgs, child []pulumi.ResourceOption) (map[string]*download.File, error) {
	images := map[string]*download.File{}
	for _, spec := range args.Nodes {
		host := spec.Host
		if images[host] != nil {
			continue
		}
		// The digest is checked by PVE at the download only (bpg passes
		// checksum and checksum-algorithm to download-url,
		// fwprovider/nodes/resource_download_file.go); bpg marks it
		// RequiresReplace, so adding one to a stack whose image is already
		// downloaded is ignored rather than a new download.
		//
		// overwriteUnmanaged is ignored after the create, so that stacks
		// whose images were created before it was set plan no update.
		opts := append(slices.Clone(child), pulumi.RetainOnDelete(true), pulumi.IgnoreChanges([]string{"checksum", "checksumAlgorithm", "overwriteUnmanaged"}))
		if host == args.NodeName {
			// The single-host name of this image, before images were per host.
			opts = append(opts, pulumi.Aliases([]pulumi.Alias{{Name: pulumi.String(name + "-image-" + args.TalosVersion)}}))
		}
		fileArgs := &download.FileArgs{
			NodeName:    pulumi.String(host),
			DatastoreId: pulumi.String(args.ImageDatastore),
			// Content type import: PVE imports it through the API (import-from),
			// with no SSH access to the host.
			ContentType: pulumi.String("import"),
			Url:         pulumi.String(args.ImageURL),
			FileName:    pulumi.String(imageFileName(name, args.TalosVersion, args.ImageURL)),
			// The factory builds images on demand; never re-download one over a
			// Content-Length difference.
			Overwrite: pulumi.Bool(false),
			// A file of this name that state does not hold is this cluster's
			// own image at this version and URL (imageFileName), left on the
			// host by a teardown (images are retained) or a lost state. bpg
			// v0.95.0's download_file has no importer (no ImportState in
			// fwprovider/nodes/resource_download_file.go) and refuses such a
			// file unless overwrite_unmanaged is set; then it deletes it and
			// downloads it again (Create, around line 430). No VM uses the
			// file: a holder's disks are copies made by import-from.
			OverwriteUnmanaged: pulumi.Bool(true),
		}
		if args.ImageSHA256 != "" {
			fileArgs.Checksum, fileArgs.ChecksumAlgorithm = pulumi.String(args.ImageSHA256), pulumi.String("sha256")
		}
		img, err := download.NewFile(ctx, name+"-"+host+"-image-"+args.TalosVersion, fileArgs, opts...)
		if err != nil {
			return nil, fmt.Errorf("proxmox substrate %q: image on %q: %w", name, host, err)
		}
		images[host] = img
	}
	return images, nil
}

// imageFileName names a Talos image on the datastore: the cluster, the
// version and a short hash of the URL, with the URL's extension (PVE's
// import content type accepts .qcow2, .raw and .vmdk).
func imageFileName(cluster, talosVersion, url string) string {
	sum := sha256.Sum256([]byte(url))
	return fmt.Sprintf("%s-talos-%s-%s%s", cluster, talosVersion, hex.EncodeToString(sum[:4]), path.Ext(url))
}

// ProxmoxImportID returns the id the provider imports a VM by: "<proxmox node>/<vm id>".
func ProxmoxImportID(nodeName string, vmID int) string {
	return nodeName + "/" + strconv.Itoa(vmID)
}
