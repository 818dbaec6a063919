package talosapi

import (
	"context"

	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc"
)

// machinedRules are the roles machined lets call each method the double
// serves (talos v1.9.5 internal/app/machined/pkg/system/services/
// machined.go, rules); methods not listed fall back to os:admin, as there.
var machinedRules = map[string]role.Set{
	"/machine.MachineService/ApplyConfiguration":   role.MakeSet(role.Admin),
	"/machine.MachineService/Bootstrap":            role.MakeSet(role.Admin),
	"/machine.MachineService/EtcdAlarmList":        role.MakeSet(role.Admin, role.Operator),
	"/machine.MachineService/EtcdLeaveCluster":     role.MakeSet(role.Admin),
	"/machine.MachineService/EtcdRecover":          role.MakeSet(role.Admin),
	"/machine.MachineService/EtcdMemberList":       role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.MachineService/EtcdRemoveMemberByID": role.MakeSet(role.Admin),
	"/machine.MachineService/EtcdSnapshot":         role.MakeSet(role.Admin, role.Operator, role.EtcdBackup),
	"/machine.MachineService/EtcdStatus":           role.MakeSet(role.Admin, role.Operator),
	"/machine.MachineService/ImagePull":            role.MakeSet(role.Admin, role.Operator),
	"/machine.MachineService/Kubeconfig":           role.MakeSet(role.Admin),
	"/machine.MachineService/Memory":               role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.MachineService/Read":                 role.MakeSet(role.Admin),
	"/machine.MachineService/Reboot":               role.MakeSet(role.Admin, role.Operator),
	"/machine.MachineService/Reset":                role.MakeSet(role.Admin),
	"/machine.MachineService/ServiceList":          role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/machine.MachineService/Shutdown":             role.MakeSet(role.Admin, role.Operator),
	"/machine.MachineService/Upgrade":              role.MakeSet(role.Admin),
	"/machine.MachineService/Version":              role.MakeSet(role.Admin, role.Operator, role.Reader),

	"/cosi.resource.State/Create":  role.MakeSet(role.Admin),
	"/cosi.resource.State/Destroy": role.MakeSet(role.Admin),
	"/cosi.resource.State/Get":     role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/cosi.resource.State/List":    role.MakeSet(role.Admin, role.Operator, role.Reader),
	"/cosi.resource.State/Update":  role.MakeSet(role.Admin),
	"/cosi.resource.State/Watch":   role.MakeSet(role.Admin, role.Operator, role.Reader),

	"/storage.StorageService/Disks": role.MakeSet(role.Admin, role.Operator, role.Reader),
}

// faultUnary answers a call FailCalls scripted to fail.
func (n *Node) faultUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := n.fault(info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (n *Node) faultStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := n.fault(info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}

func (n *Node) fault(method string) error {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	return n.faults[Entry{Method: method}.Name()]
}
