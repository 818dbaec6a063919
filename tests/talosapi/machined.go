package talosapi

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/siderolabs/talos/pkg/grpc/middleware/authz"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// machined is a configured node's machine API (talos v1.9.5
// internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go,
// Server). Methods it does not override answer Unimplemented: the double
// serves what the provider, milner and the health checks call.
type machined struct {
	machine.UnimplementedMachineServiceServer
	n *Node
}

// checkControlplane is Server.checkControlplane.
func (n *Node) checkControlplaneLocked(apiName string) error {
	if n.controlPlaneLocked() {
		return nil
	}
	return status.Errorf(codes.Unimplemented, "%s is only available on control plane nodes", apiName)
}

// ApplyConfiguration is Server.ApplyConfiguration: the mode resolved as
// there (AUTO becomes REBOOT or NO_REBOOT by canApplyImmediate; TRY and
// NO_REBOOT refuse a change that needs a reboot), the dry run answering
// the resolved mode and a diff; then NO_REBOOT (and TRY) run the new
// config, STAGED only writes it for the next boot, REBOOT writes it and
// reboots. From v1.10 a configured node refuses a config without a
// v1alpha1 document; before, canApplyImmediate answers "new config is not
// v1alpha1". From v1.13 it answers maintenance mode too (versions.go): an
// os:reader may call it only there; AUTO and REBOOT become NO_REBOOT,
// nothing is refused as needing a reboot, and a NO_REBOOT config is booted
// with at once, a STAGED one at the next boot. TRY in maintenance mode is
// not modelled (nothing calls it).
func (m *machined) ApplyConfiguration(ctx context.Context, in *machine.ApplyConfigurationRequest) (*machine.ApplyConfigurationResponse, error) {
	n := m.n
	mode := in.Mode.String()
	modeDetails := "Applied configuration with a reboot"
	modeErr := ""

	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	inMaintenance := n.active == nil
	if !inMaintenance && !authz.HasRole(ctx, role.Admin) {
		return nil, authz.ErrNotAuthorized
	}
	if in.Mode != machine.ApplyConfigurationRequest_TRY {
		n.cancelTryRollbackLocked()
	}
	next, err := parseConfig(in.GetData())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	lvl := apiLevel(n.version)
	if !inMaintenance && lvl.v1alpha1Required() && next.cfg.RawV1Alpha1() == nil {
		return nil, status.Error(codes.InvalidArgument, "the applied machine configuration doesn't contain v1alpha1 config, did you mean to patch the machine config instead?")
	}
	vmode := n.validationMode(!inMaintenance)
	warnings, err := next.cfg.Validate(vmode)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	warningsRuntime, err := next.cfg.RuntimeValidate(ctx, n.st, vmode)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	warnings = slices.Concat(warnings, warningsRuntime)
	if inMaintenance && in.Mode == machine.ApplyConfigurationRequest_REBOOT {
		in.Mode = machine.ApplyConfigurationRequest_NO_REBOOT
	}
	immediate := func() error {
		if inMaintenance {
			return nil
		}
		return canApplyImmediate(n.active.cfg, next.cfg)
	}

	//nolint:exhaustive // as machined: the rest is refused below
	switch in.Mode {
	case machine.ApplyConfigurationRequest_TRY, machine.ApplyConfigurationRequest_NO_REBOOT:
		if err := immediate(); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		modeDetails = "Applied configuration without a reboot"
	case machine.ApplyConfigurationRequest_STAGED:
		modeDetails = "Staged configuration to be applied after the next reboot"
	case machine.ApplyConfigurationRequest_AUTO:
		if err := immediate(); err != nil {
			in.Mode = machine.ApplyConfigurationRequest_REBOOT
			modeDetails = "Applied configuration with a reboot"
			modeErr = ": " + err.Error()
		} else {
			in.Mode = machine.ApplyConfigurationRequest_NO_REBOOT
			modeDetails = "Applied configuration without a reboot"
		}
		mode = fmt.Sprintf("%s(%s)", mode, in.Mode)
	}
	_ = mode // machined logs it

	if in.DryRun {
		var running config.Provider
		if !inMaintenance {
			running = n.active.cfg
		}
		details, err := generateDiff(running, next.cfg)
		if err != nil {
			return nil, fmt.Errorf("failed to generate diff: %w", err)
		}
		return &machine.ApplyConfigurationResponse{Messages: []*machine.ApplyConfiguration{{
			Mode:        in.Mode,
			ModeDetails: fmt.Sprintf("Dry run summary:\n%s (skipped in dry-run).\n%s", modeDetails, details),
		}}}, nil
	}

	//nolint:exhaustive // as machined
	switch {
	case in.Mode == machine.ApplyConfigurationRequest_TRY && inMaintenance:
		return nil, status.Error(codes.Unimplemented, "talosapi double: TRY in maintenance mode is not modelled")
	case in.Mode == machine.ApplyConfigurationRequest_TRY:
		timeout := constants.ConfigTryTimeout
		if in.TryModeTimeout != nil {
			timeout = in.TryModeTimeout.AsDuration()
		}
		modeDetails += fmt.Sprintf("\nThe config is applied in 'try' mode and will be automatically reverted back in %s", timeout.String())
		n.tryLocked(next, timeout)
	case in.Mode == machine.ApplyConfigurationRequest_NO_REBOOT && inMaintenance:
		n.persisted = next
		n.configuredLater()
	case in.Mode == machine.ApplyConfigurationRequest_NO_REBOOT:
		n.persisted, n.active = next, next
		n.c.syncLocked()
	case in.Mode == machine.ApplyConfigurationRequest_STAGED:
		n.persisted = next
		n.c.syncLocked() // the persistent MachineConfig moves ahead
	case in.Mode == machine.ApplyConfigurationRequest_REBOOT:
		n.persisted = next
		n.c.syncLocked()
		n.rebootLater("ApplyConfiguration")
	default:
		return nil, fmt.Errorf("incorrect mode '%s' specified for the apply config call", in.Mode.String())
	}
	return &machine.ApplyConfigurationResponse{Messages: []*machine.ApplyConfiguration{{
		Mode:        in.Mode,
		Warnings:    warnings,
		ModeDetails: modeDetails + modeErr,
	}}}, nil
}

// tryLocked runs next until timeout, then the config on disk again
// (Runtime.RollbackToConfigAfter); a later non-TRY apply cancels that.
func (n *Node) tryLocked(next *machineConfig, timeout time.Duration) {
	n.cancelTryRollbackLocked()
	n.active = next
	inc := n.inc
	n.tryRollback = time.AfterFunc(timeout, func() {
		n.c.mu.Lock()
		defer n.c.mu.Unlock()
		if n.inc != inc {
			return
		}
		n.active = n.persisted
		n.tryRollback = nil
		n.eventLocked("rollback", "")
		n.c.syncLocked()
	})
	n.c.syncLocked()
}

func (n *Node) cancelTryRollbackLocked() {
	if n.tryRollback != nil {
		n.tryRollback.Stop()
		n.tryRollback = nil
	}
}

// Bootstrap is Server.Bootstrap: refused until the boot sequence has come
// far enough (Runtime.IsBootstrapAllowed: the CRI is up), on a worker, and
// once etcd's data directory is not empty (a bootstrapped or joined
// member): AlreadyExists. Time sync is taken as done.
func (m *machined) Bootstrap(_ context.Context, in *machine.BootstrapRequest) (*machine.BootstrapResponse, error) {
	n := m.n
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	if !n.booted {
		return nil, status.Error(codes.FailedPrecondition, "bootstrap is not available yet")
	}
	if isWorker(n.active) {
		return nil, status.Error(codes.FailedPrecondition, "bootstrap can only be performed on a control plane node")
	}
	if err := n.waitTimeSyncLocked(); err != nil {
		return nil, err
	}
	if n.etcdData {
		return nil, status.Error(codes.AlreadyExists, "etcd data directory is not empty")
	}
	if in.GetRecoverEtcd() {
		n.recoverLocked()
		return &machine.BootstrapResponse{Messages: []*machine.Bootstrap{{}}}, nil
	}
	n.c.bootstrapLocked(n)
	return &machine.BootstrapResponse{Messages: []*machine.Bootstrap{{}}}, nil
}

// bootstrapTimeWait is how long Bootstrap waits for the time sync
// (v1alpha1_server.go: context.WithTimeout(ctx, 5*time.Second)).
const bootstrapTimeWait = 5 * time.Second

// waitTimeSyncLocked waits, as Bootstrap does, up to bootstrapTimeWait for
// the node's time to be in sync (WithTimeSync), c.mu released meanwhile.
func (n *Node) waitTimeSyncLocked() error {
	left := time.Until(n.bootedAt.Add(n.c.opts.timeSync))
	if left <= 0 {
		return nil
	}
	boot := n.bootID
	n.c.mu.Unlock()
	time.Sleep(min(left, bootstrapTimeWait))
	n.c.mu.Lock()
	switch {
	case n.bootID != boot || !n.booted:
		return status.Error(codes.Unavailable, "talosapi double: the node rebooted during Bootstrap")
	case time.Until(n.bootedAt.Add(n.c.opts.timeSync)) > 0:
		return status.Error(codes.FailedPrecondition, "time is not in sync yet")
	}
	return nil
}

// Kubeconfig is Server.Kubeconfig (control planes only; kubeconfig.go).
func (m *machined) Kubeconfig(_ *emptypb.Empty, srv machine.MachineService_KubeconfigServer) error {
	n := m.n
	n.c.mu.Lock()
	if err := n.checkControlplaneLocked("kubeconfig"); err != nil {
		n.c.mu.Unlock()
		return err
	}
	cluster, ttl := n.active.cfg.Cluster(), n.c.opts.kubeconfigTTL
	n.c.mu.Unlock()
	b, err := kubeconfigTarGz(cluster, ttl)
	if err != nil {
		return err
	}
	return srv.Send(&common.Data{Bytes: b})
}

// Version is Server.Version: the running tag, the platform, and RBAC
// (the config's machine.features.rbac; always on from v1.12); no features
// without a config (v1.13's maintenance mode).
func (m *machined) Version(context.Context, *emptypb.Empty) (*machine.VersionResponse, error) {
	n := m.n
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	var features *machine.FeaturesInfo
	if n.active != nil {
		features = &machine.FeaturesInfo{Rbac: apiLevel(n.version).rbacAlways() || legacyFeature(n.active, func(f *v1alpha1.FeaturesConfig) *bool { return f.RBAC })}
	}
	return &machine.VersionResponse{Messages: []*machine.Version{{
		Version:  n.versionInfoLocked(),
		Platform: &machine.PlatformInfo{Name: n.opts.platform.Name, Mode: n.opts.platform.Mode},
		Features: features,
	}}}, nil
}

func (n *Node) versionInfoLocked() *machine.VersionInfo {
	return &machine.VersionInfo{Tag: n.version, GoVersion: runtime.Version(), Os: "linux", Arch: "amd64"}
}

// Memory is Server.Memory: /proc/meminfo, in kB; the double reports the
// node's memory as total, free and available.
func (m *machined) Memory(context.Context, *emptypb.Empty) (*machine.MemoryResponse, error) {
	kb := m.n.opts.memoryMiB * 1024
	return &machine.MemoryResponse{Messages: []*machine.Memory{{Meminfo: &machine.MemInfo{
		Memtotal: kb, Memfree: kb / 2, Memavailable: kb / 2,
	}}}}, nil
}

// ServiceList is Server.ServiceList: Talos' system services and their
// last event and health (system.ServiceRunner.AsProto).
func (m *machined) ServiceList(context.Context, *emptypb.Empty) (*machine.ServiceListResponse, error) {
	n := m.n
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	return &machine.ServiceListResponse{Messages: []*machine.ServiceList{{Services: n.servicesLocked()}}}, nil
}

// servicesLocked are the services a v1.9 node runs: machined, apid,
// containerd, cri, udevd, kubelet, and on control planes etcd and trustd.
// etcd waits ("Preparing") until the cluster is bootstrapped and the node
// a member, and fails while SetEtcdRunning(false).
func (n *Node) servicesLocked() []*machine.ServiceInfo {
	now := timestamppb.Now()
	svc := func(id, state, msg string, healthy bool) *machine.ServiceInfo {
		return &machine.ServiceInfo{
			Id: id, State: state,
			Events: &machine.ServiceEvents{Events: []*machine.ServiceEvent{{Msg: msg, State: state, Ts: now}}},
			Health: &machine.ServiceHealth{Healthy: healthy, LastChange: now},
		}
	}
	running := func(id string) *machine.ServiceInfo { return svc(id, "Running", "Health check successful", true) }
	out := []*machine.ServiceInfo{running("apid"), running("containerd"), running("cri")}
	if n.controlPlaneLocked() {
		switch {
		case n.etcdFailed != "":
			out = append(out, svc("etcd", "Failed", "Failed to run service: "+n.etcdFailed, false))
		case n.member != nil && n.etcdRunning:
			out = append(out, running("etcd"))
		case n.member != nil:
			out = append(out, svc("etcd", "Failed", "Failed to run service: etcd exited", false))
		default:
			out = append(out, svc("etcd", "Preparing", "Running pre state", false))
		}
	}
	kubelet := running("kubelet")
	if !n.booted {
		kubelet = svc("kubelet", "Waiting", "Waiting for service \"cri\" to be \"up\"", false)
	}
	out = append(out, kubelet, running("machined"))
	if n.controlPlaneLocked() {
		out = append(out, running("trustd"))
	}
	return append(out, running("udevd"))
}

// EtcdMemberList is Server.EtcdMemberList: through the control planes'
// etcd (etcd.NewClientFromControlPlaneIPs), so it answers on any control
// plane once the cluster is bootstrapped, while a quorum of members runs.
func (m *machined) EtcdMemberList(context.Context, *machine.EtcdMemberListRequest) (*machine.EtcdMemberListResponse, error) {
	n := m.n
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	if err := n.checkControlplaneLocked("member list"); err != nil {
		return nil, err
	}
	if err := n.c.etcdClientLocked(); err != nil {
		return nil, err
	}
	var out machine.EtcdMembers
	for _, mb := range n.c.etcd.members {
		out.LegacyMembers = append(out.LegacyMembers, mb.name)
		out.Members = append(out.Members, &machine.EtcdMember{
			Id: mb.id, Hostname: mb.name, IsLearner: mb.learner,
			PeerUrls:   []string{"https://" + hostPort(mb.ip, constants.EtcdPeerPort)},
			ClientUrls: []string{"https://" + hostPort(mb.ip, constants.EtcdClientPort)},
		})
	}
	return &machine.EtcdMemberListResponse{Messages: []*machine.EtcdMembers{&out}}, nil
}

// EtcdRemoveMemberByID is Server.EtcdRemoveMemberByID: NotFound for an id
// that is not a member (rpctypes.ErrMemberNotFound).
func (m *machined) EtcdRemoveMemberByID(_ context.Context, in *machine.EtcdRemoveMemberByIDRequest) (*machine.EtcdRemoveMemberByIDResponse, error) {
	n := m.n
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	if err := n.checkControlplaneLocked("etcd remove member"); err != nil {
		return nil, err
	}
	if err := n.c.etcdClientLocked(); err != nil {
		return nil, fmt.Errorf("failed to create etcd client: %w", err)
	}
	if !n.c.removeMemberLocked(in.GetMemberId()) {
		return nil, status.Error(codes.NotFound, "etcdserver: member not found")
	}
	return &machine.EtcdRemoveMemberByIDResponse{Messages: []*machine.EtcdRemoveMemberByID{{}}}, nil
}

// EtcdLeaveCluster is Server.EtcdLeaveCluster: the node's own member
// leaves.
func (m *machined) EtcdLeaveCluster(context.Context, *machine.EtcdLeaveClusterRequest) (*machine.EtcdLeaveClusterResponse, error) {
	n := m.n
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	if err := n.checkControlplaneLocked("etcd leave"); err != nil {
		return nil, err
	}
	if err := n.c.etcdClientLocked(); err != nil {
		return nil, fmt.Errorf("failed to create etcd client: %w", err)
	}
	if n.member == nil || !n.c.removeMemberLocked(n.member.id) {
		return nil, fmt.Errorf("failed to leave cluster: %w", errors.New("etcdserver: member not found"))
	}
	return &machine.EtcdLeaveClusterResponse{Messages: []*machine.EtcdLeaveCluster{{}}}, nil
}

// EtcdStatus is Server.EtcdStatus: the local member (etcd.NewLocalClient).
func (m *machined) EtcdStatus(context.Context, *emptypb.Empty) (*machine.EtcdStatusResponse, error) {
	n := m.n
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	if err := n.checkControlplaneLocked("etcd status"); err != nil {
		return nil, err
	}
	if err := n.localEtcdLocked(); err != nil {
		return nil, fmt.Errorf("failed to query etcd status: %w", err)
	}
	var leader uint64
	if l := n.c.leaderLocked(); l != nil {
		leader = l.id
	}
	return &machine.EtcdStatusResponse{Messages: []*machine.EtcdStatus{{MemberStatus: &machine.EtcdMemberStatus{
		MemberId: n.member.id, ProtocolVersion: "3.5.17", Leader: leader, Errors: slices.Clone(n.etcdErrors),
	}}}}, nil
}

// EtcdAlarmList is Server.EtcdAlarmList: the local member's alarms (the
// double raises none).
func (m *machined) EtcdAlarmList(context.Context, *emptypb.Empty) (*machine.EtcdAlarmListResponse, error) {
	n := m.n
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	if err := n.checkControlplaneLocked("etcd alarm list"); err != nil {
		return nil, err
	}
	if err := n.localEtcdLocked(); err != nil {
		return nil, fmt.Errorf("failed to list etcd alarms: %w", err)
	}
	return &machine.EtcdAlarmListResponse{Messages: []*machine.EtcdAlarm{{}}}, nil
}

// localEtcdLocked is why the node's own etcd does not answer, if it does
// not: the client to localhost:2379 finds nothing listening.
func (n *Node) localEtcdLocked() error {
	if n.member == nil || !n.etcdRunning || !n.booted {
		return status.Error(codes.Unavailable,
			"connection error: desc = \"transport: Error while dialing: dial tcp [::1]:2379: connect: connection refused\"")
	}
	return nil
}

// Shutdown is Server.Shutdown: answered with an actor id, then the
// shutdown sequence runs (talos v1.13.9 v1alpha1_sequencer.go Shutdown):
// without force its phase 2 cordons and drains the node through
// Kubernetes (drain.go; WithKubernetes), and a drain that fails fails the
// sequence, the node left running (SequenceEvent with the error, the
// journal's "sequence-failed"); then the machine powers off (OnShutdown).
func (m *machined) Shutdown(_ context.Context, in *machine.ShutdownRequest) (*machine.ShutdownResponse, error) {
	actor := uuid.NewString()
	m.n.shutdownLater("shutdown", actor, !in.GetForce())
	return &machine.ShutdownResponse{Messages: []*machine.Shutdown{{ActorId: actor}}}, nil
}

// Reboot is Server.Reboot.
func (m *machined) Reboot(context.Context, *machine.RebootRequest) (*machine.RebootResponse, error) {
	m.n.rebootLater("Reboot")
	return &machine.RebootResponse{Messages: []*machine.Reboot{{ActorId: uuid.NewString()}}}, nil
}

// Reset is Server.Reset (talos v1.13.9 v1alpha1_server.go): answered,
// then the node leaves etcd (graceful, on a control plane), its disks are
// wiped and it reboots or powers off. With system_partitions_to_wipe
// (`talosctl reset --system-labels-to-wipe`) only the volumes named with
// wipe set are: STATE holds the machine config, EPHEMERAL /var (etcd's
// data directory, the images); a label with no volume status is refused
// before anything is done. So an EPHEMERAL wipe, the first step of Talos'
// etcd disaster recovery, reboots the node with its config and an empty
// etcd data directory (its old member, if not left, stays listed, down),
// where its etcd service runs again.
func (m *machined) Reset(_ context.Context, in *machine.ResetRequest) (*machine.ResetResponse, error) {
	n := m.n
	state, ephemeral := true, true
	if parts := in.GetSystemPartitionsToWipe(); len(parts) > 0 {
		state, ephemeral = false, false
		for _, p := range parts {
			switch p.GetLabel() {
			case "STATE":
				state = state || p.GetWipe()
			case "EPHEMERAL":
				ephemeral = ephemeral || p.GetWipe()
			default:
				return nil, fmt.Errorf("failed to get volume status with label %q: resource VolumeStatuses.block.talos.dev(runtime/%s@undefined) doesn't exist", p.GetLabel(), p.GetLabel())
			}
		}
	}
	go func() {
		n.life.Lock()
		n.c.mu.Lock()
		if in.GetGraceful() && n.member != nil {
			n.c.removeMemberLocked(n.member.id)
		}
		n.c.mu.Unlock()
		n.halt("reset", "")
		n.c.mu.Lock()
		if state {
			n.persisted, n.active, n.platform = nil, nil, nil
			n.st = newState()
		}
		if ephemeral {
			n.etcdData, n.member, n.images, n.etcdRunning = false, nil, nil, true
		}
		n.c.mu.Unlock()
		if in.GetReboot() {
			_ = n.boot()
			n.life.Unlock()
			return
		}
		n.life.Unlock()
		for _, f := range n.c.opts.onShutdown {
			f(n)
		}
	}()
	return &machine.ResetResponse{Messages: []*machine.Reset{{ActorId: uuid.NewString()}}}, nil
}

// Upgrade is Server.Upgrade (talos v1.13.9 v1alpha1_server.go): the
// installer image is pulled and validated first, before the call answers
// (WithInstallerPull times it); on a control plane without force (and,
// from v1.12, without preserve) etcd is checked (etcd.Client.
// ValidateForUpgrade); then the call answers with an actor id and the
// sequence runs. A staged upgrade (SequenceStageUpgrade) reboots and
// installs during the reboot, with no drain. Otherwise the upgrade
// sequence (v1alpha1_sequencer.go Upgrade) first cordons and drains the
// node (phase 1, drain.go): a drain that fails fails the sequence and the
// node keeps running its version, no reboot (SequenceEvent with the error,
// the journal's "sequence-failed"); a PodDisruptionBudget that refuses an
// eviction does not fail it: after the drain's timeout the node installs
// the image and reboots, the pod's eviction given up with a WARNING
// (journal "drain-warning"). Use FailCalls for a pull that fails.
func (m *machined) Upgrade(ctx context.Context, in *machine.UpgradeRequest) (*machine.UpgradeResponse, error) {
	n := m.n
	n.c.mu.Lock()
	pull := n.c.opts.installerPull
	n.c.mu.Unlock()
	select {
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	case <-time.After(pull):
	}
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	etcdCheck := !in.GetForce() && (!in.GetPreserve() || !apiLevel(n.version).preserveSkipsEtcdCheck())
	if n.controlPlaneLocked() && etcdCheck {
		if err := n.c.validateForUpgradeLocked(); err != nil {
			return nil, fmt.Errorf("error validating etcd for upgrade: %w", err)
		}
	}
	actor := uuid.NewString()
	if in.GetStage() {
		n.installLocked(in.GetImage())
		n.rebootLater("Upgrade")
	} else {
		n.upgradeLater(in.GetImage(), actor)
	}
	return &machine.UpgradeResponse{Messages: []*machine.Upgrade{{Ack: "Upgrade request received", ActorId: actor}}}, nil
}

// installLocked installs the installer image's Talos for the next boot:
// the version is the image's tag.
func (n *Node) installLocked(image string) {
	n.nextVersion = image[strings.LastIndex(image, ":")+1:]
}

// ImagePull is Server.ImagePull (talos v1.9.5 v1alpha1_images.go): the
// namespace must be the CRI's or the system's (containerdNamespaceHelper:
// InvalidArgument otherwise), then the image is pulled, skipped if
// present. The double pulls nothing and answers as a pull that succeeded
// (`talosctl upgrade-k8s` pre-pulls the new control plane and kubelet
// images so); use FailCalls for a pull that fails.
func (m *machined) ImagePull(_ context.Context, in *machine.ImagePullRequest) (*machine.ImagePullResponse, error) {
	switch in.GetNamespace() {
	case common.ContainerdNamespace_NS_CRI, common.ContainerdNamespace_NS_SYSTEM:
	default:
		return nil, status.Errorf(codes.InvalidArgument, "invalid namespace %s", in.GetNamespace())
	}
	return &machine.ImagePullResponse{Messages: []*machine.ImagePull{{}}}, nil
}

// bootIDPath is the file Read serves: the kernel's boot ID, which
// `talosctl upgrade --wait` and the provider's reset read.
const bootIDPath = "/proc/sys/kernel/random/boot_id"

// Read is Server.Read for the boot ID; any other path is not found (the
// double has no file system).
func (m *machined) Read(in *machine.ReadRequest, srv machine.MachineService_ReadServer) error {
	if in.GetPath() != bootIDPath {
		return status.Errorf(codes.NotFound, "stat %s: no such file or directory", in.GetPath())
	}
	m.n.c.mu.Lock()
	id := m.n.bootID
	m.n.c.mu.Unlock()
	return srv.Send(&common.Data{Bytes: []byte(id + "\n")})
}
