package talosapi

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"
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
//   - k8s.Nodename on a configured node: its hostname, the Kubernetes
//     node name (controllers/k8s/nodename.go; registerWithFQDN is not
//     modelled), which talosctl's nodedrain reads to find the node.
//   - block.VolumeStatus EPHEMERAL: the system disk less Talos' other
//     partitions (pkg/cluster/check AllNodesDiskSizes).
//   - k8s.StaticPodStatus for kube-apiserver, kube-controller-manager and
//     kube-scheduler on a booted control plane, Ready while its etcd
//     member is up with a quorum (kube-apiserver talks to the local etcd).
//   - No runtime.Diagnostic (check NoDiagnostics lists them).
//
// And what `talosctl upgrade-k8s` (talos pkg/cluster/kubernetes) reads and
// watches:
//
//   - config.MachineConfig v1alpha1: the running config, replaced (its
//     version bumped) when another one runs (v1alpha2_state.go, SetConfig);
//     and from v1.10 "persistent", the config the next boot runs.
//   - k8s.ControllerManagerConfig and k8s.SchedulerConfig beside
//     APIServerConfig, each the image and extra args of the running
//     config's component (controllers/k8s/control_plane.go): its version
//     moves when either does.
//   - k8s.StaticPod per control plane component, the pod Talos writes for
//     the kubelet, annotated talos.dev/config-version with the version of
//     the config resource it was made from (control_plane_static_pod.go):
//     what the kubelet's mirror pod then carries, and upgrade-k8s waits
//     for. Image, extra args as flags and labels are modelled; the rest of
//     the pod (volumes, probes, the secrets-version annotation) is not.
//   - v1alpha1.Service per service running on a configured node, Running
//     and its health (controllers/v1alpha1/service.go: created when the
//     service runs, destroyed when it leaves that state); the kubelet's is
//     destroyed and created again when the running config changes its
//     image (the kubelet service restarts with the new KubeletSpec).
func (c *Cluster) syncLocked() {
	c.reconcileEtcdLocked()
	for _, n := range c.nodes {
		n.syncNetworkLocked()
		n.syncLocked()
	}
	c.electLocked()
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
	kubeletRestarts := false
	if configured {
		if cur, err := safe.StateGetByID[*k8s.KubeletSpec](ctx, st, k8s.KubeletID); err == nil {
			kubeletRestarts = cur.TypedSpec().Image != n.active.cfg.Machine().Kubelet().Image()
		}
	}
	putIf(ctx, st, configured, k8s.NewKubeletSpec(k8s.NamespaceName, k8s.KubeletID), func(r *k8s.KubeletSpec) {
		r.TypedSpec().Image = n.active.cfg.Machine().Kubelet().Image()
	})
	putIf(ctx, st, configured, k8s.NewNodename(k8s.NamespaceName, k8s.NodenameID), func(r *k8s.Nodename) {
		r.TypedSpec().Nodename = n.hostnameLocked()
	})
	n.syncMachineConfigLocked(ctx)
	putIf(ctx, st, cp, k8s.NewAPIServerConfig(), func(r *k8s.APIServerConfig) {
		r.TypedSpec().Image = n.active.cfg.Cluster().APIServer().Image()
		r.TypedSpec().ExtraArgs = argValues(n.active.cfg.Cluster().APIServer().ExtraArgs())
	})
	putIf(ctx, st, cp, k8s.NewControllerManagerConfig(), func(r *k8s.ControllerManagerConfig) {
		r.TypedSpec().Enabled = true
		r.TypedSpec().Image = n.active.cfg.Cluster().ControllerManager().Image()
		r.TypedSpec().ExtraArgs = argValues(n.active.cfg.Cluster().ControllerManager().ExtraArgs())
	})
	putIf(ctx, st, cp, k8s.NewSchedulerConfig(), func(r *k8s.SchedulerConfig) {
		r.TypedSpec().Enabled = true
		r.TypedSpec().Image = n.active.cfg.Cluster().Scheduler().Image()
		r.TypedSpec().ExtraArgs = argValues(n.active.cfg.Cluster().Scheduler().ExtraArgs())
	})
	n.syncStaticPodsLocked(ctx, cp)
	n.syncServicesLocked(ctx, configured, kubeletRestarts)
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

// syncMachineConfigLocked keeps config.MachineConfig v1alpha1 the running
// config and, from Talos v1.10, "persistent" the one on the STATE
// partition (v1alpha1_runtime.go SetConfig and SetPersistedConfig: a
// staged apply sets only the persistent one; a new resource with the old
// one's version, updated).
func (n *Node) syncMachineConfigLocked(ctx context.Context) {
	n.putMachineConfigLocked(ctx, config.ActiveID, n.active)
	persisted := n.persisted
	if !apiLevel(n.version).persistentConfig() {
		persisted = nil
	}
	n.putMachineConfigLocked(ctx, config.PersistentID, persisted)
}

// putMachineConfigLocked makes config.MachineConfig id hold c (nil: no
// such resource).
func (n *Node) putMachineConfigLocked(ctx context.Context, id resource.ID, c *machineConfig) {
	st := n.st
	md := config.NewMachineConfigWithID(nil, id).Metadata()
	cur, err := safe.StateGet[*config.MachineConfig](ctx, st, md)
	switch {
	case err != nil && !state.IsNotFoundError(err):
		panic(fmt.Sprintf("talosapi: read %s: %v", md, err))
	case c == nil:
		putIf(ctx, st, false, config.NewMachineConfigWithID(nil, id), nil)
	case err != nil:
		if err := st.Create(ctx, config.NewMachineConfigWithID(c.cfg, id)); err != nil {
			panic(fmt.Sprintf("talosapi: write %s: %v", md, err))
		}
	default:
		raw, rerr := cur.Provider().EncodeBytes()
		now, nerr := c.cfg.EncodeBytes()
		if rerr == nil && nerr == nil && bytes.Equal(raw, now) {
			return
		}
		next := config.NewMachineConfigWithID(c.cfg, id)
		next.Metadata().SetVersion(cur.Metadata().Version())
		if err := st.Update(ctx, next); err != nil {
			panic(fmt.Sprintf("talosapi: write %s: %v", md, err))
		}
	}
}

// controlPlanePods are the static pods of a control plane and the type of
// the config resource each is made from.
var controlPlanePods = []struct {
	id  string
	cfg resource.Type
}{
	{k8s.APIServerID, k8s.APIServerConfigType},
	{k8s.ControllerManagerID, k8s.ControllerManagerConfigType},
	{k8s.SchedulerID, k8s.SchedulerConfigType},
}

// syncStaticPodsLocked writes each control plane component's pod from its
// config resource (image, extra args, the config's version), or removes
// them off a control plane.
func (n *Node) syncStaticPodsLocked(ctx context.Context, cp bool) {
	st := n.st
	k8sVersion := ""
	if cp {
		k8sVersion = strings.TrimPrefix(imageTag(n.active.cfg.Cluster().APIServer().Image()), "v")
	}
	for _, p := range controlPlanePods {
		var image string
		var args map[string]k8s.ArgValues
		version := ""
		if cp {
			r, err := st.Get(ctx, resource.NewMetadata(k8s.ControlPlaneNamespaceName, p.cfg, p.id, resource.VersionUndefined))
			if err != nil {
				panic(fmt.Sprintf("talosapi: read %s: %v", p.id, err))
			}
			version = r.Metadata().Version().String()
			switch spec := r.Spec().(type) {
			case *k8s.APIServerConfigSpec:
				image, args = spec.Image, spec.ExtraArgs
			case *k8s.ControllerManagerConfigSpec:
				image, args = spec.Image, spec.ExtraArgs
			case *k8s.SchedulerConfigSpec:
				image, args = spec.Image, spec.ExtraArgs
			}
		}
		command := []string{"/usr/local/bin/" + p.id}
		// argsbuilder.Args.Args: each value of a key its own flag, keys sorted.
		for _, k := range slices.Sorted(maps.Keys(args)) {
			for _, v := range args[k].Values {
				command = append(command, fmt.Sprintf("--%s=%s", k, v))
			}
		}
		putIf(ctx, st, cp, k8s.NewStaticPod(k8s.NamespaceName, p.id), func(r *k8s.StaticPod) {
			r.TypedSpec().Pod = map[string]any{
				"apiVersion": "v1",
				"kind":       "Pod",
				"metadata": map[string]any{
					"name":      p.id,
					"namespace": "kube-system",
					"annotations": map[string]any{
						constants.AnnotationStaticPodConfigVersion: version,
					},
					"labels": map[string]any{
						"tier": "control-plane", "k8s-app": p.id, "component": p.id,
						"app.kubernetes.io/name": p.id, "app.kubernetes.io/version": k8sVersion,
						"app.kubernetes.io/component": "control-plane", "app.kubernetes.io/managed-by": "Talos",
					},
				},
				"spec": map[string]any{
					"containers": []any{map[string]any{"name": p.id, "image": image, "command": toAny(command)}},
				},
			}
		})
	}
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// imageTag is the tag of an image reference ("" without one).
func imageTag(image string) string {
	if i := strings.LastIndex(image, ":"); i >= 0 && !strings.Contains(image[i:], "/") {
		return image[i+1:]
	}
	return ""
}

// serviceIDs are the services servicesLocked may list.
var serviceIDs = []string{"apid", "containerd", "cri", "etcd", "kubelet", "machined", "trustd", "udevd"}

// syncServicesLocked keeps one v1alpha1.Service per service running on a
// configured node; a restarting kubelet's is destroyed first.
func (n *Node) syncServicesLocked(ctx context.Context, configured, kubeletRestarts bool) {
	st := n.st
	running := map[string]*machine.ServiceInfo{}
	if configured && n.inc != nil {
		for _, s := range n.servicesLocked() {
			if s.GetState() == "Running" {
				running[s.GetId()] = s
			}
		}
	}
	if kubeletRestarts {
		putIf(ctx, st, false, v1alpha1.NewService("kubelet"), nil)
	}
	for _, id := range serviceIDs {
		s, ok := running[id]
		putIf(ctx, st, ok, v1alpha1.NewService(id), func(r *v1alpha1.Service) {
			*r.TypedSpec() = v1alpha1.ServiceSpec{Running: true, Healthy: s.GetHealth().GetHealthy(), Unknown: s.GetHealth().GetUnknown()}
		})
	}
}

// StaticPods returns the pods Talos wrote for the node's kubelet (its
// k8s.StaticPod resources: on a control plane kube-apiserver,
// kube-controller-manager and kube-scheduler), by ID. A test playing the
// kubelet mirrors them into the Kubernetes API.
func (n *Node) StaticPods() map[string]map[string]any {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	list, err := safe.StateListAll[*k8s.StaticPod](context.Background(), n.st)
	if err != nil {
		panic(fmt.Sprintf("talosapi: list static pods: %v", err))
	}
	out := map[string]map[string]any{}
	for p := range list.All() {
		out[p.Metadata().ID()] = p.TypedSpec().DeepCopy().Pod
	}
	return out
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

// argValues is a config's extra args as the control plane config
// resources hold them (ControlPlaneStaticPodController reads each key's
// Values).
func argValues(args map[string][]string) map[string]k8s.ArgValues {
	out := make(map[string]k8s.ArgValues, len(args))
	for k, v := range args {
		out[k] = k8s.ArgValues{Values: v}
	}
	return out
}
