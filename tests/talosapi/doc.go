// Package talosapi is a test double of the Talos API: one Cluster of Nodes,
// each listening on its own address (netip.AddrPort) and answering Talos'
// machine, storage and COSI state APIs as Talos v1.9 serves them. Its
// server logic is a re-implementation, read from Talos' source (each
// behaviour cites where, below), not Talos' own server code: what it takes
// from Talos is machinery's generated API types, client, config loading,
// validation, patching and diff and resource types, the gRPC authz
// middleware (Injector, Authorizer) and pkg/kubeconfig. Only tests import
// it.
//
// # Using it
//
//	c := talosapi.NewCluster(talosapi.OnShutdown(func(n *talosapi.Node) { stopVM(n.Name()) }))
//	defer c.Close()
//	cp1, err := c.AddNode("cp-1", netip.MustParseAddrPort("127.0.0.2:0")) // port 0: any free port
//	// cp1 is in maintenance mode: a client with TLS and no client
//	// certificate applies its first config (talosctl apply-config --insecure),
//	// or the test configures it as Talos' nocloud platform would:
//	err = cp1.Configure(machineConfigYAML)
//	// From then on cp1 serves mutual TLS against the config's machine.ca.
//	// c.Journal() lists every call each node took; c.Journal().Calls("Reset")
//	// must stay empty in Milner's scenarios.
//
// Unit tests bind loopback addresses (127.0.0.0/8 is all loopback on Linux,
// so each node gets its own IP without root); the real-engine scenarios bind
// each node's own address on :50000 inside a network namespace. A client
// dialling a bare IP appends :50000; "node"/"nodes" metadata name nodes by
// IP only, so every node of a Cluster needs its own IP.
//
// # What is modelled, and where it was read
//
// Talos v1.9.5 is the version the stacks run; behaviour was read in its
// source (tag v1.9.5 of siderolabs/talos) and compared with v1.12.0 (the
// module cache); where they differ this follows v1.9 and says so.
//
//   - Maintenance mode, until a node has a config
//     (internal/app/maintenance/server.go, Server; the listener in
//     internal/app/machined/pkg/controllers/runtime/maintenance_service.go,
//     MaintenanceServiceController.Run): TLS without client authentication
//     (maintenance.TLSProvider: tls.ServerOnly) and a self-signed
//     certificate; every caller gets the os:reader role
//     (authz.ReadOnlyWithAdminOnSiderolink, no SideroLink here), and no
//     authorizer runs. ApplyConfiguration takes AUTO, REBOOT and TRY only
//     (anything else: Unimplemented "apply configuration --mode='staged'
//     is not supported in maintenance mode"), parses the config with
//     machinery's configloader (a parse error is a plain error, code
//     Unknown, "failed to parse config: ..."), validates it (InvalidArgument
//     "configuration validation failed: ..."), and a dry run answers with
//     no mode set: Mode 0, which is REBOOT. Version, Upgrade and Reset need
//     the admin role and so answer Unimplemented "API is not implemented in
//     maintenance mode"; methods the maintenance server does not implement
//     answer gRPC's own Unimplemented. Disks lists the node's block.Disk
//     resources (internal/app/storaged/server.go, Server.Disks).
//   - Configured mode (apid, internal/app/apid/main.go and
//     pkg/provider/provider.go): mutual TLS (tls.Mutual:
//     RequireAndVerifyClientCert) against machine.ca and machine.acceptedCAs
//     of the node's running config; the server certificate is issued from
//     machine.ca for the node's IP and hostname with ServerAuth
//     (internal/app/machined/pkg/controllers/secrets/api.go,
//     generateControlPlane). Roles come from the client certificate's
//     organizations when machine.features.rbac is on (authz.Enabled), else
//     every role (authz.Disabled); with
//     machine.features.apidCheckExtKeyUsage the client certificate must
//     carry exactly the ClientAuth extended key usage (apid main.go,
//     verifyExtKeyUsage). machined then authorizes each method by role
//     with Talos' own authz.Authorizer and the rules of
//     internal/app/machined/pkg/system/services/machined.go (rules.go here).
//   - apid's routing (internal/app/apid/pkg/director/director.go,
//     Router.Director; pkg/backend/apid.go, APID.AppendInfo and
//     BuildError): no "node"/"nodes" metadata is answered by the node
//     itself; "node" proxies one to one (the answer unchanged, without
//     metadata); "nodes" fans out and merges each node's messages, each
//     with Metadata.Hostname set to the target as given, a node that cannot
//     be reached becoming a message with Metadata.Error and Status; COSI
//     methods refuse "nodes" (InvalidArgument). Reaching another node is
//     modelled in process (front.go): a node that is down or unreachable
//     answers as a refused connection.
//   - machined's calls (internal/app/machined/internal/server/v1alpha1/
//     v1alpha1_server.go): ApplyConfiguration in every mode with the dry
//     run and the reboot decision of Runtime.CanApplyImmediate
//     (internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_runtime.go; the
//     same field list in v1.9.5 and v1.12.0; applymode.go); a STAGED config
//     is written for the next boot and stays pending, REBOOT (and AUTO that
//     needs one) reboots the node; Bootstrap, Kubeconfig (kubeconfig.go),
//     Version, Memory, ServiceList, the etcd calls, Shutdown, Upgrade,
//     Reset, Reboot, Read of the boot ID, Disks, and the COSI resources
//     Milner and the health checks read (resources.go).
//   - The node's network (network.go): one physical link with the node's
//     MAC (WithMAC); a config's device takes its static address and VIP
//     only where its deviceSelector matches that link (talos v1.13.9
//     controllers/network/device_config.go, selectDevices; a device that
//     matches nothing is skipped with a log line, journaled here as a
//     "network" event), and a link no device applies to runs DHCP
//     (operator_config.go), which hands the node its address unless
//     WithoutDHCPLease. A node without its address answers nowhere.
//   - The VIP's election (vip.go, from controllers/network/operator/
//     vip.go): the first control plane to campaign once its etcd member
//     votes with a quorum holds it (Cluster.VIPHolder, "vip" events); a
//     graceful reboot or shutdown resigns and the next takes it at once,
//     a power cut or a network cut leaves it unheld for WithVIPLeaseTTL
//     (Talos: the session lease's 60 s).
//
// Nothing in the double reboots by itself: a node reboots only when a call
// makes Talos reboot it (Reboot, Upgrade, an apply in REBOOT mode or AUTO
// resolved to it, Reset with reboot) or when a test power-cycles it; each
// reboot is a "reboot" event in the journal, naming its cause.
//
// # What is not modelled
//
// There is no list in code of what the double leaves out. Known gaps:
// time (a node boots, reboots, syncs its clock and joins etcd at once
// unless a test sets WithBootDelay, WithRebootDowntime, WithTimeSync,
// WithLearnerPromotion or WithManualReady; TestTalosControlPlanesOnRealPlugin
// powers each double on only a while after its VM's domain starts, and
// sets WithTimeSync), and of the network all but the deviceSelector and
// the VIP's holder: link names (a device named by interface is taken as
// the node's one link), bonds, VLANs and bond selectors
// (device_config.go expandBondSelector), an address other than the one
// the node listens on (a static address that differs from its DHCP one,
// or a changed address: address_config.go and AddressSpecController),
// routes and nameservers, the VIP's own announcement (gratuitous ARP,
// operator/vip/; the harness closes a connection to an unheld VIP where
// a real client's connect times out), apid answering on the VIP, and the
// holder giving the VIP up when its kube-apiserver's static pod goes
// (vip.go watches StaticPodStatus). Shutdown and Upgrade cordon and drain
// the node first only when the test gives the cluster a Kubernetes API
// (WithKubernetes, or SetKubernetes once it runs: the real-plugin
// scenarios hand over the played cluster's; drain.go, from talos
// v1.13.9's sequences and pkg/kubernetes Drain), and Upgrade
// takes time to pull the installer only with WithInstallerPull; of the
// sequences' phases only the drain publishes its events (MachineService.
// Events), a failed sequence leaves the Node cordoned (the machine
// stage Talos returns to after a failed sequence was not read), and a
// graceful Reset drains nothing (Talos drains there too, its failure only
// logged: Sequencer.Reset, taskErrorHandler(logError, CordonAndDrainNode)).
//
// Where a model of each would be read from (Talos v1.13.9): boot to
// maintenance mode and reboot,
// internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer.go
// (Initialize, Boot, Reboot); Bootstrap's FailedPrecondition until CRI runs
// (modelled: until booted) and time is in sync (modelled: WithTimeSync,
// with Bootstrap's 5 s wait), internal/app/machined/internal/server/
// v1alpha1/v1alpha1_server.go (Bootstrap) and controllers/time/sync.go; a
// learner joining etcd and its promotion (WithLearnerPromotion times it),
// internal/app/machined/pkg/controllers/etcd/member.go and
// internal/pkg/etcd/; the static
// address taken only where deviceSelector matches the MAC (modelled),
// internal/app/machined/pkg/controllers/network/device_config.go and
// operator_config.go; the VIP answered only by the etcd-elected control
// plane (modelled, but its announcement),
// internal/app/machined/pkg/controllers/network/operator/vip.go.
package talosapi
