package talosapi

import (
	"maps"

	"github.com/siderolabs/talos/pkg/machinery/role"
	"golang.org/x/mod/semver"
)

// A node answers as the Talos version it runs. What changed in the
// machine API along Milner's upgrade path (v1.9.5 to v1.13.9), read at
// the tags of siderolabs/talos:
//
//   - v1.10.0: the config saved to the STATE partition is a resource of
//     its own, config.MachineConfig "persistent" beside the running
//     "v1alpha1" (pkg/machinery resources/config/machine_config.go
//     PersistentID: ahead of the running one after a staged apply);
//     machined's rules let os:reader and os:etcd:backup call
//     EtcdStatus, EtcdAlarmList and EtcdMemberList
//     (internal/app/machined/pkg/system/services/machined.go); a
//     configured node refuses a config without a v1alpha1 document
//     (v1alpha1_server.go ApplyConfiguration: "the applied machine
//     configuration doesn't contain v1alpha1 config").
//   - v1.12.0: Server.Upgrade validates etcd only for an upgrade that
//     neither forces nor preserves ("!in.GetForce() && !in.GetPreserve()";
//     before, every control plane's upgrade without force); RBAC is always
//     on (apid main.go: authz.Enabled; Version reports Rbac true), where
//     before machine.features.rbac chose.
//   - v1.13.0: the maintenance service is gone (b7d70cf6 "feat: unify
//     maintenance and regular APIs"): apid serves maintenance mode itself
//     (controllers/runtime/api_service_config.go: no client certificate
//     verified, the reader role, no node routing) in front of machined,
//     whose handlers check ConfigCompleteForBoot (ApplyConfiguration takes
//     every mode and resolves AUTO and REBOOT to NO_REBOOT there; os:reader
//     may call it, "for maintenance only, verified in the handler");
//     LifecycleService (Install, Upgrade) and ImageService (List, Pull,
//     ...) are new; MachineService.Upgrade and ImagePull are deprecated
//     (removed in v1.18) but served.
type apiLevel string

// atLeast reports a node version at or after since.
func (l apiLevel) atLeast(since string) bool { return semver.Compare(string(l), since) >= 0 }

func (l apiLevel) etcdReader() bool             { return l.atLeast("v1.10.0") }
func (l apiLevel) persistentConfig() bool       { return l.atLeast("v1.10.0") }
func (l apiLevel) v1alpha1Required() bool       { return l.atLeast("v1.10.0") }
func (l apiLevel) preserveSkipsEtcdCheck() bool { return l.atLeast("v1.12.0") }
func (l apiLevel) rbacAlways() bool             { return l.atLeast("v1.12.0") }
func (l apiLevel) unifiedMaintenance() bool     { return l.atLeast("v1.13.0") }
func (l apiLevel) lifecycle() bool              { return l.atLeast("v1.13.0") }

// rules are machined's rules at this version for the methods the double
// serves; methods not listed fall back to os:admin, as there.
func (l apiLevel) rules() map[string]role.Set {
	r := maps.Clone(machinedRules)
	if l.etcdReader() {
		for _, m := range []string{"EtcdStatus", "EtcdAlarmList", "EtcdMemberList"} {
			r["/machine.MachineService/"+m] = role.MakeSet(role.Admin, role.Operator, role.Reader, role.EtcdBackup)
		}
	}
	if l.lifecycle() {
		r["/machine.MachineService/ApplyConfiguration"] = role.MakeSet(role.Admin, role.Reader) // reader: maintenance only, checked in the handler
		r["/machine.LifecycleService/Upgrade"] = role.MakeSet(role.Admin)
		r["/machine.ImageService/Pull"] = role.MakeSet(role.Admin, role.Operator)
		r["/machine.ImageService/List"] = role.MakeSet(role.Admin, role.Operator, role.Reader)
	}
	return r
}
