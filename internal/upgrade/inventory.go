package upgrade

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/milner/milner/components/vocab"
	"github.com/milner/milner/internal/applymode"
)

// Row is one node's declared and running versions.
type Row struct {
	// Node is the node.
	Node Node `json:"node"`
	// Talos is the Talos version the node runs (Version API).
	Talos string `json:"talosVersion,omitempty"`
	// Kubelet is the tag of the node's kubelet image (KubeletSpec resource).
	Kubelet string `json:"kubelet,omitempty"`
	// APIServer is the tag of the node's kube-apiserver image
	// (APIServerConfig resource); control planes only.
	APIServer string `json:"apiServer,omitempty"`
	// Staged is the config the node holds for its next boot, when it
	// differs from the one it runs: a staged apply, Milner's or anyone's
	// (Talos v1.10 on: config.MachineConfig "persistent" against
	// "v1alpha1", pkg/machinery resources/config/machine_config.go;
	// machined's STAGED apply sets only the persistent one,
	// v1alpha1_server.go). "yes", "no", or why it is not known.
	Staged string `json:"staged,omitempty"`
	// Err is why the node could not be asked ("" when it answered); the
	// other fields are then empty.
	Err string `json:"error,omitempty"`
	// NoAnswer is set when nothing answered at the node's address (the
	// dial refused or timed out), as against a node that answered
	// otherwise than asked (maintenance mode, a TLS refusal).
	NoAnswer bool `json:"-"`
}

// NotCreatedYet is Err for a node whose VM the run creates: there is
// nothing to ask yet, and it is no broken node.
const NotCreatedYet = "not created yet: this run creates its VM"

// Staged's answers.
const (
	StagedYes = "yes"
	StagedNo  = "no"
)

// Inventory asks every declared node, at once, which Talos and Kubernetes
// versions it runs, in config order. A node that cannot be asked has Err
// set. `milner status`, `preview` and `up` print it with Versions.Write.
func Inventory(ctx context.Context, c *Cluster) []Row {
	rows := make([]Row, len(c.declared.Nodes))
	each(c.declared.Nodes, func(i int, n Node) { rows[i] = c.row(ctx, n) })
	return rows
}

// row asks one node.
func (c *Cluster) row(ctx context.Context, n Node) Row {
	r := Row{Node: n}
	var err error
	if r.Talos, err = c.talosVersion(ctx, n); err != nil {
		r.Err = fmt.Sprintf("talos version: %v", err)
		// A node not configured yet (one being added) refuses the
		// cluster's client certificate: it is in maintenance mode.
		switch code := status.Code(err); {
		case applymode.InMaintenance(ctx, n.Endpoint):
			r.Err = "maintenance mode: not configured yet (milner up applies its first config)"
		default:
			r.NoAnswer = code == codes.Unavailable || code == codes.DeadlineExceeded
		}
		return r
	}
	cosi := c.clients[n.Name].COSI
	kubelet, err := safe.StateGetByID[*k8s.KubeletSpec](ctx, cosi, k8s.KubeletID)
	if err != nil {
		r.Err = fmt.Sprintf("kubelet spec: %v", err)
		return r
	}
	r.Kubelet = imageTag(kubelet.TypedSpec().Image)
	if n.Role == vocab.RoleControlPlane {
		api, err := safe.StateGetByID[*k8s.APIServerConfig](ctx, cosi, k8s.APIServerConfigID)
		if err != nil {
			r.Err = fmt.Sprintf("kube-apiserver config: %v", err)
			return r
		}
		r.APIServer = imageTag(api.TypedSpec().Image)
	}
	r.Staged = staged(ctx, cosi)
	return r
}

// staged reads whether a node holds a config for its next boot other
// than the one it runs (Row.Staged).
func staged(ctx context.Context, cosi state.State) string {
	persistent, err := safe.StateGetByID[*config.MachineConfig](ctx, cosi, config.PersistentID)
	if state.IsNotFoundError(err) {
		return "not known: this Talos has no persistent MachineConfig (v1.10 and later have)"
	}
	if err != nil {
		return fmt.Sprintf("not known: %v", err)
	}
	active, err := safe.StateGetByID[*config.MachineConfig](ctx, cosi, config.ActiveID)
	if err != nil {
		return fmt.Sprintf("not known: %v", err)
	}
	next, nerr := persistent.Provider().EncodeBytes()
	now, aerr := active.Provider().EncodeBytes()
	if err := errors.Join(nerr, aerr); err != nil {
		return fmt.Sprintf("not known: %v", err)
	}
	if bytes.Equal(next, now) {
		return StagedNo
	}
	return StagedYes
}

// imageTag returns the tag of an image reference (registry:port/name:tag).
func imageTag(image string) string {
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") {
		return ""
	}
	return image[i+1:]
}

// mark is running, with the declared version when it differs.
func mark(running, declared string) string {
	if running == declared {
		return running
	}
	return fmt.Sprintf("%s (declared %s) *", running, declared)
}

// Versions is each node's declared against running versions, as `milner
// status --versions`, `preview` and `up` print them, or why they are not
// known.
type Versions struct {
	// Declared is what the stack declares (its versions in the JSON).
	Declared
	// Rows are the nodes' answers, in config order; nil when not asked.
	Rows []Row `json:"nodes,omitempty"`
	// Note says why the nodes were not asked ("" when they were).
	Note string `json:"note,omitempty"`
}

// AskVersions asks every declared node what it runs, within timeout, with
// the talosconfig cfg. It never fails: a node that does not answer is a
// row with Err, and a cluster that cannot be asked at all is the Note.
func AskVersions(ctx context.Context, cfg *clientconfig.Config, d Declared, timeout time.Duration) Versions {
	v := Versions{Declared: d}
	if err := dial(ctx, cfg, d, timeout, func(ctx context.Context, c *Cluster) { v.Rows = Inventory(ctx, c) }); err != nil {
		v.Note = err.Error()
	}
	return v
}

// Write prints declared against running versions per node, marking every
// difference, so drift is never silent, and a line counting the drifting
// nodes; or one line saying why the versions are not known.
func (v Versions) Write(w io.Writer) {
	if v.Note != "" || !slices.ContainsFunc(v.Rows, func(r Row) bool { return r.Err == "" }) {
		note := v.Note
		if note == "" {
			note = "no node answered"
		}
		_, _ = fmt.Fprintf(w, "versions: not known (%s); declared Talos %s, Kubernetes %s\n", note, v.TalosVersion, v.KubernetesVersion)
		return
	}
	_, _ = fmt.Fprintln(w, "versions (running; declared where they differ):")
	_, _ = fmt.Fprintf(w, "%-12s %-12s %-22s %-22s\n", "NODE", "ROLE", "TALOS run (declared)", "KUBERNETES run (declared)")
	for _, r := range v.Rows {
		switch r.Err {
		case "":
		case NotCreatedYet:
			_, _ = fmt.Fprintf(w, "%-12s %-12s %s\n", r.Node.Name, r.Node.Role, r.Err)
			continue
		default:
			_, _ = fmt.Fprintf(w, "%-12s %-12s unreachable: %v\n", r.Node.Name, r.Node.Role, r.Err)
			continue
		}
		k := r.Kubelet
		if r.APIServer != "" && r.APIServer != r.Kubelet {
			k = fmt.Sprintf("kubelet %s, apiserver %s", r.Kubelet, r.APIServer)
		}
		line := fmt.Sprintf("%-12s %-12s %-22s %-22s", r.Node.Name, r.Node.Role, mark(r.Talos, v.TalosVersion), mark(k, v.KubernetesVersion))
		if r.Staged == StagedYes {
			line += " holds a staged config for its next reboot"
		}
		_, _ = fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
	if lag := Lagging(v.Declared, v.Rows); len(lag) > 0 {
		_, _ = fmt.Fprintf(w, "drift on %d nodes: `milner upgrade` moves them; until then `milner up` changes no Talos config\n", len(lag))
	}
}
