package talosapi

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/grpc/middleware/authz"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/api/storage"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// maintenanceServer is the maintenance service's machine API (talos v1.9.5
// internal/app/maintenance/server.go, Server; identical in v1.12.0 but for
// GenerateConfiguration). What it does not implement answers gRPC's
// Unimplemented, as there (it embeds UnimplementedMachineServiceServer).
type maintenanceServer struct {
	machine.UnimplementedMachineServiceServer
	n *Node
}

// ApplyConfiguration is Server.ApplyConfiguration: AUTO, REBOOT and TRY
// only; a dry run sets no mode in its answer.
func (s *maintenanceServer) ApplyConfiguration(ctx context.Context, in *machine.ApplyConfigurationRequest) (*machine.ApplyConfigurationResponse, error) {
	//nolint:exhaustive // as the maintenance service
	switch in.Mode {
	case machine.ApplyConfigurationRequest_TRY, machine.ApplyConfigurationRequest_REBOOT, machine.ApplyConfigurationRequest_AUTO:
	default:
		return nil, status.Errorf(codes.Unimplemented, "apply configuration --mode='%s' is not supported in maintenance mode",
			strings.ReplaceAll(strings.ToLower(in.Mode.String()), "_", "-"))
	}
	next, err := parseConfig(in.GetData())
	if err != nil {
		return nil, fmt.Errorf("failed to parse config: %w", err)
	}
	n := s.n
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	vmode := n.validationMode(false)
	warnings, err := next.cfg.Validate(vmode)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "configuration validation failed: %s", err)
	}
	warningsRuntime, err := next.cfg.RuntimeValidate(ctx, n.st, vmode)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "runtime configuration validation failed: %s", err)
	}
	reply := &machine.ApplyConfigurationResponse{Messages: []*machine.ApplyConfiguration{{
		Warnings: slices.Concat(warnings, warningsRuntime),
	}}}
	if in.DryRun {
		reply.Messages[0].ModeDetails = "Dry run summary:\nNode is running in maintenance mode and does not have a config yet."
		return reply, nil
	}
	n.persisted = next
	n.configuredLater()
	return reply, nil
}

// assertAdminRole is Server.assertAdminRole: only SideroLink peers are
// admins in maintenance mode, and the double has none.
func assertAdminRole(ctx context.Context) error {
	if !authz.HasRole(ctx, role.Admin) {
		return status.Error(codes.Unimplemented, "API is not implemented in maintenance mode")
	}
	return nil
}

// Version is Server.Version: admin only.
func (s *maintenanceServer) Version(ctx context.Context, _ *emptypb.Empty) (*machine.VersionResponse, error) {
	if err := assertAdminRole(ctx); err != nil {
		return nil, err
	}
	n := s.n
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	return &machine.VersionResponse{Messages: []*machine.Version{{
		Version:  n.versionInfoLocked(),
		Platform: &machine.PlatformInfo{Name: n.opts.platform.Name, Mode: n.opts.platform.Mode},
	}}}, nil
}

// Upgrade is Server.Upgrade: admin only.
func (s *maintenanceServer) Upgrade(ctx context.Context, _ *machine.UpgradeRequest) (*machine.UpgradeResponse, error) {
	return nil, assertAdminRole(ctx)
}

// Reset is Server.Reset: admin only.
func (s *maintenanceServer) Reset(ctx context.Context, _ *machine.ResetRequest) (*machine.ResetResponse, error) {
	return nil, assertAdminRole(ctx)
}

// GenerateClientConfiguration is Server.GenerateClientConfiguration.
func (s *maintenanceServer) GenerateClientConfiguration(context.Context, *machine.GenerateClientConfigurationRequest) (*machine.GenerateClientConfigurationResponse, error) {
	return nil, status.Error(codes.Unimplemented, "client configuration (talosconfig) can't be generated in the maintenance mode")
}

// storaged is the storage API, in both modes (talos v1.9.5
// internal/app/storaged/server.go, Server).
type storaged struct {
	storage.UnimplementedStorageServiceServer
	n *Node
}

// Disks is Server.Disks: the block.Disk resources.
func (s *storaged) Disks(ctx context.Context, _ *emptypb.Empty) (*storage.DisksResponse, error) {
	s.n.c.mu.Lock()
	st := s.n.st
	s.n.c.mu.Unlock()
	systemDisk, err := safe.StateGetByID[*block.SystemDisk](ctx, st, block.SystemDiskID)
	if err != nil && !state.IsNotFoundError(err) {
		return nil, err
	}
	disks, err := safe.StateListAll[*block.Disk](ctx, st)
	if err != nil {
		return nil, err
	}
	conv := func(d *block.Disk) *storage.Disk {
		var t storage.Disk_DiskType
		switch spec := d.TypedSpec(); {
		case spec.CDROM:
			t = storage.Disk_CD
		case spec.Transport == "nvme":
			t = storage.Disk_NVME
		case spec.Transport == "mmc":
			t = storage.Disk_SD
		case spec.Rotational:
			t = storage.Disk_HDD
		case spec.Transport != "":
			t = storage.Disk_SSD
		}
		spec := d.TypedSpec()
		return &storage.Disk{
			DeviceName: filepath.Join("/dev", d.Metadata().ID()),
			Model:      spec.Model, Size: spec.Size, Serial: spec.Serial, Modalias: spec.Modalias,
			Wwid: spec.WWID, Uuid: spec.UUID, Type: t, BusPath: spec.BusPath,
			SystemDisk: systemDisk != nil && d.Metadata().ID() == systemDisk.TypedSpec().DiskID,
			Subsystem:  spec.SubSystem, Readonly: spec.Readonly,
		}
	}
	return &storage.DisksResponse{Messages: []*storage.Disks{{Disks: safe.ToSlice(disks, conv)}}}, nil
}
