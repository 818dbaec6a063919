package talosapi

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
)

// The COSI resources a node serves, derived from its state after every
// change: what Milner (internal/upgrade) and talos pkg/cluster/check read.
//
//   - block.Disk per disk, block.SystemDisk once configured (storaged's
//     Disks and machinery's disk matching read them).
//   - runtime.MachineStatus: the stage and the readiness of
//     internal/app/machined/pkg/controllers/runtime/machine_status.go
//     (MachineStatusController): no readiness checks outside the booting
//     and running stages (so ready in maintenance), else the unmet
//     conditions services, staticPods and nodeReady.
//   - k8s.KubeletSpec and (control planes) k8s.APIServerConfig with the
//     images of the running config.
//   - block.VolumeStatus EPHEMERAL: the system disk less Talos' other
//     partitions (pkg/cluster/check AllNodesDiskSizes).
//   - k8s.StaticPodStatus for kube-apiserver, kube-controller-manager and
//     kube-scheduler on a booted control plane, Ready while its etcd
//     member is up with a quorum (kube-apiserver talks to the local etcd).
//   - No runtime.Diagnostic (check NoDiagnostics lists them).
func (c *Cluster) syncLocked() {
	c.reconcileEtcdLocked()
	for _, n := range c.nodes {
		n.syncLocked()
	}
}

func (n *Node) syncLocked() {
	ctx := context.Background()
	st := n.st
	configured := n.active != nil
	for _, d := range n.opts.disks {
		put(ctx, st, block.NewDisk(block.NamespaceName, filepath.Base(d.DevPath)), func(r *block.Disk) {
			s := r.TypedSpec()
			s.DevPath, s.Transport, s.Model, s.SubSystem = d.DevPath, "virtio", "QEMU HARDDISK", "/sys/class/block"
			s.IOSize, s.SectorSize = 512, 512
			s.SetSize(d.Size)
		})
	}
	system := n.opts.disks[0]
	putIf(ctx, st, configured, block.NewSystemDisk(block.NamespaceName, block.SystemDiskID), func(r *block.SystemDisk) {
		r.TypedSpec().DiskID, r.TypedSpec().DevPath = filepath.Base(system.DevPath), system.DevPath
	})

	stage, unmet := n.stageLocked()
	put(ctx, st, runtime.NewMachineStatus(), func(r *runtime.MachineStatus) {
		r.TypedSpec().Stage = stage
		r.TypedSpec().Status.Ready = len(unmet) == 0
		r.TypedSpec().Status.UnmetConditions = unmet
	})

	cp := n.controlPlaneLocked()
	putIf(ctx, st, configured, k8s.NewKubeletSpec(k8s.NamespaceName, k8s.KubeletID), func(r *k8s.KubeletSpec) {
		r.TypedSpec().Image = n.active.cfg.Machine().Kubelet().Image()
	})
	putIf(ctx, st, cp, k8s.NewAPIServerConfig(), func(r *k8s.APIServerConfig) {
		r.TypedSpec().Image = n.active.cfg.Cluster().APIServer().Image()
	})
	// Talos' partitions besides EPHEMERAL on a BIOS/EFI disk: EFI 100 MiB,
	// BIOS 1 MiB, BOOT 1000 MiB, META 1 MiB, STATE 100 MiB (v1.9
	// constants), and GPT overhead.
	const others = (100 + 1 + 1000 + 1 + 100 + 10) << 20
	putIf(ctx, st, configured, block.NewVolumeStatus(block.NamespaceName, constants.EphemeralPartitionLabel), func(r *block.VolumeStatus) {
		s := r.TypedSpec()
		s.Phase, s.Type, s.Filesystem = block.VolumePhaseReady, block.VolumeTypePartition, block.FilesystemTypeXFS
		s.Location, s.ParentLocation, s.MountLocation = system.DevPath+"6", system.DevPath, system.DevPath+"6"
		s.SetSize(system.Size - others)
	})
	podsReady := n.staticPodsReadyLocked()
	for _, pod := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		id := fmt.Sprintf("kube-system/%s-%s", pod, n.hostnameLocked())
		putIf(ctx, st, cp && n.booted, k8s.NewStaticPodStatus(k8s.NamespaceName, id), func(r *k8s.StaticPodStatus) {
			cond := "False"
			if podsReady {
				cond = "True"
			}
			r.TypedSpec().PodStatus = map[string]any{
				"phase":      "Running",
				"conditions": []any{map[string]any{"type": "Ready", "status": cond}},
			}
		})
	}
}

// staticPodsReadyLocked reports a control plane's static pods ready: its
// kube-apiserver reaches etcd through its own member, with a quorum.
func (n *Node) staticPodsReadyLocked() bool {
	return n.member != nil && n.member.upLocked() && n.c.quorumLocked()
}

// stageLocked is the node's MachineStatus stage and unmet conditions.
func (n *Node) stageLocked() (runtime.MachineStage, []runtime.UnmetCondition) {
	switch {
	case n.inc == nil:
		return runtime.MachineStageShuttingDown, nil
	case n.active == nil:
		return runtime.MachineStageMaintenance, nil
	}
	stage := runtime.MachineStageRunning
	if !n.booted {
		stage = runtime.MachineStageBooting
	}
	var unmet []runtime.UnmetCondition
	var notRunning []string
	if !n.booted {
		notRunning = append(notRunning, "kubelet not running")
	}
	if n.controlPlaneLocked() && (n.member == nil || !n.etcdRunning || !n.booted) {
		notRunning = append(notRunning, "etcd not running")
	}
	if len(notRunning) > 0 {
		unmet = append(unmet, runtime.UnmetCondition{Name: "services", Reason: join(notRunning)})
	}
	host := n.hostnameLocked()
	if n.controlPlaneLocked() && n.booted && !n.staticPodsReadyLocked() {
		unmet = append(unmet, runtime.UnmetCondition{Name: "staticPods", Reason: fmt.Sprintf("kube-system/kube-apiserver-%s not ready", host)})
	}
	switch {
	case !n.c.etcd.bootstrapped || !n.c.quorumLocked():
		unmet = append(unmet, runtime.UnmetCondition{Name: "nodeReady", Reason: fmt.Sprintf("node %q status is not available yet", host)})
	case !n.nodeReady || !n.booted:
		unmet = append(unmet, runtime.UnmetCondition{Name: "nodeReady", Reason: fmt.Sprintf("node %q is not ready", host)})
	}
	return stage, unmet
}

func join(s []string) string {
	out := ""
	for i, p := range s {
		if i > 0 {
			out += ", "
		}
		out += p
	}
	return out
}

// put creates or updates r with set.
func put[T resource.Resource](ctx context.Context, st state.State, r T, set func(T)) {
	if err := safe.StateModify(ctx, st, r, func(r T) error { set(r); return nil }); err != nil {
		panic(fmt.Sprintf("talosapi: write %s: %v", r.Metadata(), err))
	}
}

// putIf puts r while want holds, else removes it.
func putIf[T resource.Resource](ctx context.Context, st state.State, want bool, r T, set func(T)) {
	if want {
		put(ctx, st, r, set)
		return
	}
	if err := st.Destroy(ctx, r.Metadata()); err != nil && !state.IsNotFoundError(err) {
		panic(fmt.Sprintf("talosapi: remove %s: %v", r.Metadata(), err))
	}
}
