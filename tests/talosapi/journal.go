package talosapi

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/grpc/middleware/authz"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Entry is one call a node took, or one thing that happened to it (Event).
type Entry struct {
	// Time is when the call arrived or the event happened.
	Time time.Time
	// Done is when the call was answered (zero for an event, and while the
	// call runs).
	Done time.Time
	// Node is the node's name.
	Node string
	// Method is the full gRPC method, e.g. "/machine.MachineService/Version";
	// "" for an event.
	Method string
	// Event is a lifecycle event ("" for a call): "boot" (Detail
	// "maintenance" or "configured"), "reboot" (Detail: its cause, the
	// method that asked for it or "power-cycle"), "shutdown", "power-off",
	// "wipe", "reset", "rollback" (a TRY config reverted), "drain" and
	// "drained" (the drain phase of a Shutdown's or an Upgrade's sequence
	// began, Detail the sequence, and ended, Detail its error if it failed;
	// journaled where the node drains through a Kubernetes API:
	// WithKubernetes), "drain-warning"
	// (Detail: an eviction Talos' drain gave up, its log line),
	// "sequence-failed" (Detail: why a Shutdown's or an Upgrade's sequence
	// stopped, the node left running; drain.go).
	Event string
	// Detail says more about an event.
	Detail string
	// Client is who called, as the node's apid saw the connection.
	Client Identity
	// Roles are the roles the call ran with.
	Roles []string
	// Via is the node whose apid proxied the call (the client sent "node"
	// or "nodes" metadata to it); "" when the node was called directly.
	Via string
	// Request is a copy of the request (the first message of a stream).
	Request proto.Message
	// Response is a copy of a unary call's response; nil on error and for
	// streams.
	Response proto.Message
	// Err is the call's error ("" when it succeeded).
	Err error
}

// Name is the method's last element ("Version", "Get"), or the event.
func (e Entry) Name() string {
	if e.Method == "" {
		return e.Event
	}
	return path.Base(e.Method)
}

// Mode is an ApplyConfiguration's requested mode.
func (e Entry) Mode() machine.ApplyConfigurationRequest_Mode {
	r, _ := e.Request.(*machine.ApplyConfigurationRequest)
	return r.GetMode()
}

// DryRun reports an ApplyConfiguration dry run.
func (e Entry) DryRun() bool {
	r, _ := e.Request.(*machine.ApplyConfigurationRequest)
	return r.GetDryRun()
}

// Resolved is the mode an ApplyConfiguration answered with (AUTO resolves
// to REBOOT or NO_REBOOT; maintenance mode sets none, i.e. REBOOT).
func (e Entry) Resolved() machine.ApplyConfigurationRequest_Mode {
	r, _ := e.Response.(*machine.ApplyConfigurationResponse)
	if len(r.GetMessages()) == 0 {
		return e.Mode()
	}
	return r.GetMessages()[0].GetMode()
}

// String is one line: node, call or event, mode and outcome.
func (e Entry) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", e.Node, e.Name())
	if e.Event != "" {
		if e.Detail != "" {
			fmt.Fprintf(&b, " (%s)", e.Detail)
		}
		return b.String()
	}
	if _, ok := e.Request.(*machine.ApplyConfigurationRequest); ok {
		fmt.Fprintf(&b, " mode=%s", e.Mode())
		if e.DryRun() {
			b.WriteString(" dry-run")
		}
		if e.Err == nil {
			fmt.Fprintf(&b, " resolved=%s", e.Resolved())
		}
	}
	fmt.Fprintf(&b, " by %s", e.Client)
	if e.Via != "" {
		fmt.Fprintf(&b, " via %s", e.Via)
	}
	if e.Err != nil {
		fmt.Fprintf(&b, ": %s", status.Code(e.Err))
	}
	return b.String()
}

// Identity is a caller as a node's TLS listener saw it.
type Identity struct {
	// Insecure is a connection without a client certificate (maintenance
	// mode only: configured nodes refuse them).
	Insecure bool
	// CommonName and Organizations are the client certificate's subject;
	// Talos reads roles from the organizations.
	CommonName    string
	Organizations []string
}

// String is "insecure" or the certificate's CN and organizations.
func (i Identity) String() string {
	if i.Insecure {
		return "insecure"
	}
	return fmt.Sprintf("%s%v", i.CommonName, i.Organizations)
}

// Journal is a list of entries, oldest first.
type Journal []Entry

// Calls returns the calls of the named method (its last element, e.g.
// "ApplyConfiguration", or its full name).
func (j Journal) Calls(method string) Journal {
	return j.filter(func(e Entry) bool {
		return e.Method != "" && (e.Method == method || e.Name() == method)
	})
}

// Events returns the lifecycle events of one kind ("reboot", ...).
func (j Journal) Events(event string) Journal {
	return j.filter(func(e Entry) bool { return e.Event == event })
}

// On returns the entries of one node.
func (j Journal) On(node string) Journal {
	return j.filter(func(e Entry) bool { return e.Node == node })
}

// Applies returns the ApplyConfiguration calls that were not dry runs.
func (j Journal) Applies() Journal {
	return j.Calls("ApplyConfiguration").filter(func(e Entry) bool { return !e.DryRun() })
}

// Succeeded returns the calls that succeeded.
func (j Journal) Succeeded() Journal {
	return j.filter(func(e Entry) bool { return e.Method != "" && e.Err == nil })
}

// Nodes returns the names of the nodes in the entries, in order of first
// appearance.
func (j Journal) Nodes() []string {
	var out []string
	for _, e := range j {
		if !slices.Contains(out, e.Node) {
			out = append(out, e.Node)
		}
	}
	return out
}

// Strings returns each entry's String.
func (j Journal) Strings() []string {
	out := make([]string, len(j))
	for i, e := range j {
		out[i] = e.String()
	}
	return out
}

func (j Journal) filter(keep func(Entry) bool) Journal {
	var out Journal
	for _, e := range j {
		if keep(e) {
			out = append(out, e)
		}
	}
	return out
}

// The metadata keys the front (apid) passes to the node's machined: who
// called and through which node. Internal to the double.
const (
	mdClient = "x-talosapi-client"
	mdOrgs   = "x-talosapi-orgs"
	mdVia    = "x-talosapi-via"
)

func identityFromMD(ctx context.Context) (Identity, string) {
	md, _ := metadata.FromIncomingContext(ctx)
	cn, cert := strings.CutPrefix(first(md, mdClient), "cert:")
	id := Identity{Insecure: !cert, CommonName: cn, Organizations: md.Get(mdOrgs)}
	return id, first(md, mdVia)
}

func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// journalUnary records every unary call n takes, before it runs (so what
// the call causes is journaled after it) and completes the entry with the
// outcome.
func (n *Node) journalUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	i := n.record(ctx, info.FullMethod, req)
	resp, err := handler(ctx, req)
	n.c.complete(i, resp, err)
	return resp, err
}

// journalStream is journalUnary for streams; the request is the first
// message the client sent.
func (n *Node) journalStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	i := n.record(ss.Context(), info.FullMethod, nil)
	err := handler(srv, &recordingStream{ServerStream: ss, c: n.c, i: i})
	n.c.complete(i, nil, err)
	return err
}

type recordingStream struct {
	grpc.ServerStream
	c    *Cluster
	i    int
	seen bool
}

func (s *recordingStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil && !s.seen {
		s.seen = true
		if pm, ok := m.(proto.Message); ok {
			s.c.mu.Lock()
			s.c.journal[s.i].Request = proto.Clone(pm)
			s.c.mu.Unlock()
		}
	}
	return err
}

func (n *Node) record(ctx context.Context, method string, req any) int {
	id, via := identityFromMD(ctx)
	e := Entry{Time: time.Now(), Node: n.name, Method: method, Client: id, Via: via, Roles: authz.GetRoles(ctx).Strings()}
	if pm, ok := req.(proto.Message); ok {
		e.Request = proto.Clone(pm)
	}
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	n.c.journal = append(n.c.journal, e)
	return len(n.c.journal) - 1
}

func (c *Cluster) complete(i int, resp any, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.journal[i].Err = err
	c.journal[i].Done = time.Now()
	if pm, ok := resp.(proto.Message); ok && err == nil {
		c.journal[i].Response = proto.Clone(pm)
	}
}

// eventLocked journals a lifecycle event of n (c.mu held).
func (n *Node) eventLocked(event, detail string) {
	n.c.journal = append(n.c.journal, Entry{Time: time.Now(), Node: n.name, Event: event, Detail: detail})
}

// Journal returns everything every node was asked and went through, oldest
// first.
func (c *Cluster) Journal() Journal {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.journal)
}

// ResetJournal forgets the journal (e.g. after a test's setup).
func (c *Cluster) ResetJournal() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.journal = nil
}

// Journal returns this node's entries.
func (n *Node) Journal() Journal { return n.c.Journal().On(n.name) }
