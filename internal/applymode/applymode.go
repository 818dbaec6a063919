// Package applymode decides, for each node, the apply mode of its Talos
// configuration from what the node answers, once per milner run, so that a
// node is never rebooted by Milner and the mode the preview shows is the
// mode the update sends.
//
// Why not the provider's staged_if_needing_reboot: terraform-provider-talos
// v0.10.1 resolves it with a dry-run ApplyConfiguration in AUTO mode and
// takes "reboot" from the answer's mode
// (pkg/talos/talos_machine_configuration_apply_resource.go,
// handleRebootPrevention). A node in maintenance mode answers a dry run
// with no mode set (talos v1.9.5 internal/app/maintenance/server.go,
// Server.ApplyConfiguration), and 0 is REBOOT (machine.pb.go), so the
// provider sends STAGED, which maintenance mode refuses as Unimplemented;
// the provider retries that until its 10-minute timeout. And where the dry
// run cannot run (the node unreachable) it falls back to "auto", which
// Talos resolves again when it applies and reboots if the change needs it
// (machined v1alpha1_server.go, ApplyConfiguration: AUTO becomes REBOOT
// when Runtime.CanApplyImmediate refuses). Both are re-decided when the
// bridge plans again at apply time, after the preview was reviewed.
//
// What Milner sends instead, as the apply's apply_mode input (a mode other
// than staged_if_needing_reboot is taken as given: resolved_apply_mode
// equals it and no dry run runs in the provider):
//
//   - maintenance mode (the node answers the Talos API over TLS without a
//     client certificate, as the provider's own probe checks: util.go
//     talosClientOp, Disks): "auto". Maintenance mode takes AUTO, REBOOT
//     and TRY only; it has no running config to reboot out of, the node
//     installs and boots the config it received.
//   - configured (mutual TLS with the cluster's client certificate): a dry
//     run in AUTO mode; NO_REBOOT gives "no_reboot", anything else
//     "staged". NO_REBOOT is binding: machined refuses it (InvalidArgument,
//     which the provider does not retry) rather than reboot, if the change
//     needs a reboot after all.
//   - configured and already running this very config (the dry run's diff
//     is "No changes.": talos v1.11.5 machined v1alpha1_server.go,
//     generateDiff): the mode state records, if any. A node's first config
//     is recorded as "auto"; deciding "no_reboot" on the next run would
//     change the apply's applyMode input, and the provider answers any
//     input change with an Update that sends ApplyConfiguration again
//     (talos_machine_configuration_apply_resource.go, Update): a no-op
//     `up` would re-apply every node.
//   - a node whose OS disk is new in this run (Fresh: `--os-disk`) boots
//     into maintenance mode whatever it answers now: "auto".
//   - configured, and its dry run refused (an answer of the node's: a
//     config that fails its validation, InvalidArgument; a client
//     certificate it does not accept, expired or from another CA, a TLS
//     alert): that error, so the preview shows what the update would meet
//     instead of a mode (Answered says what counts as an answer).
//   - no answer: "staged", never a live mode Milner cannot vouch for;
//     except for a node taking its first config (First: its apply is not
//     in state). If its VM is new in this run (not Adopted), it has not
//     booted yet: it will come up in maintenance mode (or, on Proxmox,
//     configured from its nocloud drive with this very config), so
//     "auto". If its VM was already there (Adopted: recovery after a lost
//     state, `adopt --all` then `up`), it may be a configured node that
//     answers by the time the update applies; AUTO there reboots it when
//     the change needs a reboot (machined: AUTO becomes REBOOT when
//     CanApplyImmediate refuses), so it gets "no_reboot", which never
//     reboots: a configured node applies it live or refuses it
//     (InvalidArgument), a v1.13 node in maintenance mode boots it, and
//     maintenance mode before v1.13 refuses it; a refusal fails the up
//     naming the node, and the next run, the node answering, decides
//     again.
//
// Before any of that, a node whose config is the one its apply recorded
// (Applied: the provider's machine_configuration output, the patched
// config it applied) keeps the mode state records, and nothing is sent to
// it: the engine plans no update for it, so there is nothing to decide,
// and keeping the recorded mode keeps the plan empty (a first config is
// recorded as "auto"; the provider answers any input change with an
// Update that sends ApplyConfiguration again,
// talos_machine_configuration_apply_resource.go Update). So a no-op up,
// or an up that changes one node, asks the other nodes nothing, and a
// dead node that `--replace` revives plans no update of its config.
package applymode

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The apply modes Milner sends (the provider's apply_mode values).
const (
	// Auto is a first config, taken in maintenance mode.
	Auto = "auto"
	// NoReboot applies the change live; Talos refuses it rather than reboot.
	NoReboot = "no_reboot"
	// Staged writes the change for the node's next reboot.
	Staged = "staged"
)

// Request is one node's apply, as the program declares it.
type Request struct {
	// Node is the node's name.
	Node string
	// Address is the node's Talos API address.
	Address netip.Addr
	// Config is the node's rendered machine configuration.
	Config string
	// Patches are applied to Config, in order, as the provider applies the
	// apply's configPatches.
	Patches []string
	// CA, Cert and Key are the cluster's talosctl client identity, base64
	// PEM as the secrets bundle's clientConfiguration holds them.
	CA, Cert, Key string
}

// Decider decides each node's apply mode once: the preview and the update
// of one milner run get the same answer for the same config.
type Decider struct {
	// First names the nodes taking their first config in this run.
	First map[string]bool
	// Fresh names the nodes whose OS disk is new in this run.
	Fresh map[string]bool
	// Adopted names the First nodes whose VM is already in state, or is
	// imported by this run (adopt --all's nodes[i].adoptId): it may run a
	// config this state does not know.
	Adopted map[string]bool
	// Recorded is each node's apply mode as state records it.
	Recorded map[string]string
	// Applied is each node's machine configuration as its apply in state
	// records it was applied (patches applied): a secret, held in memory.
	Applied map[string]string
	// Endpoint is where a node's Talos API is dialled; nil: the address
	// itself (the client adds port 50000).
	Endpoint func(netip.Addr) string
	// Timeout bounds each probe; zero: 10s.
	Timeout time.Duration

	mu   sync.Mutex
	memo map[string]decision
}

// decision is one config's decided mode, or the node's refusal of it.
type decision struct {
	mode string
	err  error
}

// Mode returns the node's apply mode (Auto, NoReboot or Staged), or the
// error a configured node answered its dry run with.
func (d *Decider) Mode(ctx context.Context, r Request) (string, error) {
	key := r.key()
	d.mu.Lock()
	defer d.mu.Unlock()
	if m, ok := d.memo[key]; ok {
		return m.mode, m.err
	}
	mode, err := d.decide(ctx, r)
	if d.memo == nil {
		d.memo = map[string]decision{}
	}
	d.memo[key] = decision{mode, err}
	return mode, err
}

func (r Request) key() string {
	h := sha256.New()
	for _, s := range append([]string{r.Node, r.Address.String(), r.Config}, r.Patches...) {
		_, _ = fmt.Fprintf(h, "%d:%s", len(s), s)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (d *Decider) decide(ctx context.Context, r Request) (string, error) {
	timeout := d.Timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	if d.Fresh[r.Node] {
		return Auto, nil
	}
	if rec := d.Recorded[r.Node]; rec != "" && d.unchanged(r) {
		return rec, nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	endpoint := r.Address.String()
	if d.Endpoint != nil {
		endpoint = d.Endpoint(r.Address)
	}
	if InMaintenance(ctx, endpoint) {
		return Auto, nil
	}
	mode, same, err := dryRun(ctx, endpoint, r)
	// TLS 1.3 checks the client certificate after the client thinks the
	// handshake done: a node refusing it (expired, another CA) may close
	// the connection before its alert is read, and the client sees a
	// broken pipe or a reset. Asking again reads the alert.
	for try := 1; try < 5 && err != nil && refusedMidHandshake(err); try++ {
		time.Sleep(time.Duration(try) * 50 * time.Millisecond)
		mode, same, err = dryRun(ctx, endpoint, r)
	}
	switch {
	case err == nil:
		if rec := d.Recorded[r.Node]; same && rec != "" {
			return rec, nil
		}
		return mode, nil
	case Answered(err):
		return "", fmt.Errorf("node %s (%s) refused the dry run of its config: %w", r.Node, endpoint, err)
	case d.First[r.Node] && d.Adopted[r.Node]:
		return NoReboot, nil
	case d.First[r.Node]:
		return Auto, nil
	}
	return Staged, nil
}

// refusedMidHandshake reports an error that may hide a TLS refusal: the
// connection broken by the peer on the first write.
func refusedMidHandshake(err error) bool {
	st, ok := status.FromError(err)
	msg := st.Message() // a nil status has an empty message
	return ok && st.Code() == codes.Unavailable &&
		(strings.Contains(msg, "broken pipe") || strings.Contains(msg, "connection reset") || strings.HasSuffix(msg, "EOF") || strings.HasSuffix(msg, `EOF"`))
}

// Answered reports whether a dry run's error is the node's answer rather
// than no answer at all. The Talos client's calls fail with gRPC statuses;
// a status the server sent (InvalidArgument from validation,
// PermissionDenied from authz, Unknown from a config that does not parse:
// talos v1.9.5 machined v1alpha1_server.go ApplyConfiguration) is an
// answer. grpc-go reports what happened on the way as Unavailable
// (connection refused, no route, the connection closed) or
// DeadlineExceeded/Canceled (the probe's timeout): no answer, except an
// Unavailable whose cause is TLS, which grpc-go carries only as text, a
// crypto/tls "tls: " or crypto/x509 "x509: " error in its "connection
// error: desc = ..." (an expired client certificate reads "error reading
// server preface: remote error: tls: expired certificate"; a server
// certificate milner does not trust "authentication handshake failed:
// tls: ..."): the node's TLS stack answered and refused the client
// certificate, or showed one milner does not trust. An error that is not a status (the config's patches, the
// client identity) is milner's own: the provider meets it at apply, as
// today.
func Answered(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch st.Code() { //nolint:exhaustive // every other code is the server's answer
	case codes.OK, codes.DeadlineExceeded, codes.Canceled:
		return false
	case codes.Unavailable:
		msg := st.Message()
		return strings.Contains(msg, "tls: ") || strings.Contains(msg, "x509: ")
	}
	return true
}

// unchanged reports whether the node's config, patched as the provider
// patches it, is the one its apply recorded.
func (d *Decider) unchanged(r Request) bool {
	applied, ok := d.Applied[r.Node]
	if !ok || applied == "" {
		return false
	}
	cfg, err := patched(r.Config, r.Patches)
	return err == nil && string(cfg) == applied
}

// InMaintenance is the provider's probe: only a node in maintenance mode
// answers a client without a certificate (a configured node requires one).
// Such a node holds no config.
func InMaintenance(ctx context.Context, endpoint string) bool {
	c, err := client.New(ctx, client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true}), client.WithEndpoints(endpoint)) //nolint:gosec // the provider's own probe; nothing secret is sent
	if err != nil {
		return false
	}
	defer func() { _ = c.Close() }()
	_, err = c.Disks(ctx)
	return err == nil
}

// noChanges ends a dry run's details when the node runs the very config
// (machined's generateDiff: "Config diff:\n\n" + "No changes.").
const noChanges = "Config diff:\n\nNo changes."

// dryRun asks a configured node whether the config applies without a
// reboot (machined resolves AUTO by Runtime.CanApplyImmediate), and
// whether it runs that config already (same).
func dryRun(ctx context.Context, endpoint string, r Request) (mode string, same bool, err error) {
	cfg, err := patched(r.Config, r.Patches)
	if err != nil {
		return "", false, err
	}
	tc, err := talosconfig(r)
	if err != nil {
		return "", false, err
	}
	c, err := client.New(ctx, client.WithConfig(tc), client.WithEndpoints(endpoint))
	if err != nil {
		return "", false, err
	}
	defer func() { _ = c.Close() }()
	resp, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Mode: machine.ApplyConfigurationRequest_AUTO, Data: cfg, DryRun: true})
	if err != nil {
		return "", false, err
	}
	msgs := resp.GetMessages()
	if len(msgs) == 0 {
		return Staged, false, nil
	}
	same = strings.HasSuffix(strings.TrimSpace(msgs[0].GetModeDetails()), noChanges)
	if msgs[0].GetMode() == machine.ApplyConfigurationRequest_NO_REBOOT {
		return NoReboot, same, nil
	}
	return Staged, same, nil
}

// patched applies patches to config with Talos' config patcher, as the
// provider computes the config it applies (ModifyPlan: LoadPatches, Apply,
// Bytes, also for no patches).
func patched(config string, patches []string) ([]byte, error) {
	ps, err := configpatcher.LoadPatches(patches)
	if err != nil {
		return nil, fmt.Errorf("config patches: %w", err)
	}
	out, err := configpatcher.Apply(configpatcher.WithBytes([]byte(config)), ps)
	if err != nil {
		return nil, fmt.Errorf("config patches: %w", err)
	}
	return out.Bytes()
}

// talosconfig is the client identity as the provider builds it
// (util.go, talosClientTFConfigToTalosClientConfig).
func talosconfig(r Request) (*clientconfig.Config, error) {
	var pem [3][]byte
	for i, s := range []string{r.CA, r.Cert, r.Key} {
		b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("client configuration: %w", err)
		}
		pem[i] = b
	}
	return clientconfig.NewConfig("dynamic", nil, pem[0], &x509.PEMEncodedCertificateAndKey{Crt: pem[1], Key: pem[2]}), nil
}
