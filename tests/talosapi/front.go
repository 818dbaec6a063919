package talosapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	cosiv1alpha1 "github.com/cosi-project/runtime/api/v1alpha1"
	cosiserver "github.com/cosi-project/runtime/pkg/state/protobuf/server"
	sidx509 "github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/grpc/middleware/authz"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/api/storage"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// An incarnation is one boot of a node: its "apid" (the front, on the
// node's address, a transparent proxy like Talos' apid) and its "machined"
// (the backend, in process over an in-memory listener: the maintenance
// service in maintenance mode, machined otherwise). Every call enters
// through a node's front, which authenticates the connection, injects the
// caller's roles and routes the call to its own or other nodes' backends;
// the backends journal, authorize and answer it.
type incarnation struct {
	n           *Node
	maintenance bool
	tlsConfig   *tls.Config
	rbac        bool

	backend *grpc.Server
	bufLis  *bufconn.Listener
	conn    *grpc.ClientConn // to the backend
	level   apiLevel         // the Talos version this boot runs

	mu    sync.Mutex // guards front
	front *grpc.Server
}

// newIncarnationLocked builds the servers of the node's current boot
// (c.mu held).
func (n *Node) newIncarnationLocked() (*incarnation, error) {
	lvl := apiLevel(n.version)
	inc := &incarnation{n: n, maintenance: n.active == nil, level: lvl}
	var err error
	if inc.maintenance {
		// v1.9 to v1.12: maintenance.TLSProvider, tls.ServerOnly, the
		// maintenance service's own certificate
		// (secrets.MaintenanceServiceCerts); v1.13: apid with
		// SkipVerifyingClientCert and the same maintenance certificate
		// (controllers/secrets/api.go).
		inc.tlsConfig, err = maintenanceTLS(n.addr.Addr(), n.hostnameLocked())
	} else {
		sec := n.active.cfg.Machine().Security()
		var caCrt []byte
		if sec.IssuingCA() != nil {
			caCrt = sec.IssuingCA().Crt
		}
		inc.tlsConfig, err = apidTLS(caCrt, sec.AcceptedCAs(), n.addr.Addr(), n.hostnameLocked(),
			lvl.rbacAlways() || legacyFeature(n.active, func(f *v1alpha1.FeaturesConfig) *bool { return f.ApidCheckExtKeyUsage }), func() (*sidx509.PEMEncodedCertificateAndKey, error) {
				return n.c.issuer(caCrt)
			})
		inc.rbac = lvl.rbacAlways() || legacyFeature(n.active, func(f *v1alpha1.FeaturesConfig) *bool { return f.RBAC })
	}
	if err != nil {
		return nil, err
	}

	// The backend: machined's interceptors (services/machined.go, Main):
	// roles from metadata, then the authorizer. The maintenance service of
	// v1.9 to v1.12 has no authorizer (controllers/runtime/
	// maintenance_service.go); from v1.13 machined answers maintenance
	// mode too, its rules and all (versions.go).
	legacyMaintenance := inc.maintenance && !lvl.unifiedMaintenance()
	mdOnly := &authz.Injector{Mode: authz.MetadataOnly}
	unary := []grpc.UnaryServerInterceptor{mdOnly.UnaryInterceptor(), n.journalUnary}
	stream := []grpc.StreamServerInterceptor{mdOnly.StreamInterceptor(), n.journalStream}
	if !legacyMaintenance {
		authorizer := &authz.Authorizer{Rules: lvl.rules(), FallbackRoles: role.MakeSet(role.Admin)}
		unary = append(unary, authorizer.UnaryInterceptor())
		stream = append(stream, authorizer.StreamInterceptor())
	}
	unary = append(unary, n.faultUnary)
	stream = append(stream, n.faultStream)
	inc.backend = grpc.NewServer(grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(stream...))
	if legacyMaintenance {
		machine.RegisterMachineServiceServer(inc.backend, &maintenanceServer{n: n})
	} else {
		machine.RegisterMachineServiceServer(inc.backend, &machined{n: n})
	}
	if lvl.lifecycle() {
		machine.RegisterLifecycleServiceServer(inc.backend, &lifecycle{n: n})
		machine.RegisterImageServiceServer(inc.backend, &images{n: n})
	}
	storage.RegisterStorageServiceServer(inc.backend, &storaged{n: n})
	cosiv1alpha1.RegisterStateServer(inc.backend, cosiserver.NewState(n.st))
	return inc, nil
}

// issuer is the machine CA whose certificate is caCrt, with its key, from
// the config of a running control plane (the node's own, or trustd's on
// another control plane for a worker).
func (c *Cluster) issuer(caCrt []byte) (*sidx509.PEMEncodedCertificateAndKey, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, o := range c.nodes {
		if o.active == nil || o.inc == nil || !o.reachable {
			continue
		}
		if ca := o.active.cfg.Machine().Security().IssuingCA(); ca != nil && len(ca.Key) > 0 && bytes.Equal(ca.Crt, caCrt) {
			return ca, nil
		}
	}
	return nil, errors.New("no control plane's trustd issues a certificate yet")
}

// start serves the backend and, if the node is reachable, the front.
func (inc *incarnation) start() error {
	inc.bufLis = bufconn.Listen(1 << 20)
	go func() { _ = inc.backend.Serve(inc.bufLis) }() // returns when stopped
	conn, err := grpc.NewClient("passthrough:///machined",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return inc.bufLis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		inc.backend.Stop()
		return err
	}
	inc.conn = conn
	inc.n.c.mu.Lock()
	reachable := inc.n.reachable && inc.n.addressed // network.go
	inc.n.c.mu.Unlock()
	if !reachable {
		return nil
	}
	if err := inc.startFront(); err != nil {
		inc.stop()
		return err
	}
	return nil
}

// startFront listens on the node's address and serves the front.
func (inc *incarnation) startFront() error {
	n := inc.n
	inc.mu.Lock()
	defer inc.mu.Unlock()
	if inc.front != nil {
		return nil
	}
	n.c.mu.Lock()
	addr := n.addr
	n.c.mu.Unlock()
	lis, err := listen(addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	if addr.Port() == 0 {
		n.c.mu.Lock()
		n.addr = netip.AddrPortFrom(addr.Addr(), uint16(lis.Addr().(*net.TCPAddr).Port))
		n.c.mu.Unlock()
	}
	// apid: authz.Enabled when machine.features.rbac is on, else Disabled
	// (internal/app/apid/main.go); the maintenance service:
	// ReadOnlyWithAdminOnSiderolink, and no caller here is a SideroLink
	// peer.
	injector := &authz.Injector{Mode: authz.Disabled}
	switch {
	case inc.maintenance:
		injector = &authz.Injector{Mode: authz.ReadOnlyWithAdminOnSiderolink,
			SideroLinkPeerCheckFunc: func(context.Context) (netip.Addr, bool) { return netip.Addr{}, false }}
	case inc.rbac:
		injector = &authz.Injector{Mode: authz.Enabled}
	}
	inc.front = grpc.NewServer(
		grpc.Creds(credentials.NewTLS(inc.tlsConfig)),
		grpc.ForceServerCodecV2(rawCodec{}),
		grpc.UnknownServiceHandler(inc.proxy),
		grpc.StreamInterceptor(injector.StreamInterceptor()),
	)
	go func(s *grpc.Server) { _ = s.Serve(lis) }(inc.front) // returns when stopped
	return nil
}

// stopFront stops listening; calls in flight are cut after a grace period
// (as factory.ServerGracefulStop does when Talos stops a service).
// listen binds the node's address. A node that comes back binds the
// port it had: while it was away, a socket of the host (another test's
// connection, one the kernel still holds) may have held that port for a
// moment, so a taken port is tried again for a few seconds, as a rebooted
// node's apid comes up when its address is free.
func listen(addr netip.AddrPort) (net.Listener, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		lis, err := net.Listen("tcp", addr.String())
		if err == nil || addr.Port() == 0 || !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			return lis, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (inc *incarnation) stopFront() {
	inc.mu.Lock()
	front := inc.front
	inc.front = nil
	inc.mu.Unlock()
	if front != nil {
		gracefulStop(front, 2*time.Second)
	}
}

func (inc *incarnation) stop() {
	inc.stopFront()
	if inc.conn != nil {
		_ = inc.conn.Close()
	}
	inc.backend.Stop()
}

func (inc *incarnation) serving() bool {
	inc.mu.Lock()
	defer inc.mu.Unlock()
	return inc.front != nil
}

func gracefulStop(s *grpc.Server, grace time.Duration) {
	done := make(chan struct{})
	go func() { s.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		s.Stop()
	}
}

// proxy is apid's transparent handler: every method, every service
// (grpc-proxy's TransparentHandler with apid's Router.Director).
func (inc *incarnation) proxy(_ any, ss grpc.ServerStream) error {
	method, ok := grpc.MethodFromServerStream(ss)
	if !ok {
		return status.Error(codes.Internal, "no method")
	}
	ctx := ss.Context()
	md, _ := metadata.FromIncomingContext(ctx)
	md = md.Copy()
	id := peerIdentity(ctx)
	md.Set(mdClient, "insecure")
	if !id.Insecure {
		md.Set(mdClient, "cert:"+id.CommonName)
	}
	md.Delete(mdOrgs)
	if len(id.Organizations) > 0 {
		md.Set(mdOrgs, id.Organizations...)
	}
	md.Delete(mdVia)
	// backend.Local/APID GetConnection: the roles travel as metadata.
	authz.SetMetadata(md, authz.GetRoles(ctx))

	// The maintenance service is no proxy: it answers whatever metadata
	// says.
	if inc.maintenance {
		return inc.one2one(ss, method, md, inc.n)
	}
	// director.go, Router.Director.
	_, proxied := md["proxyfrom"]
	nodes, okNodes := md["nodes"]
	node, okNode := md["node"]
	if okNode && len(node) != 1 {
		return status.Error(codes.InvalidArgument, "node metadata must be single-valued")
	}
	switch {
	case proxied:
		return inc.one2one(ss, method, md, inc.n)
	case okNodes:
		if strings.HasPrefix(method, "/cosi.") {
			return status.Error(codes.InvalidArgument, "one-2-many proxying is not supported for COSI methods")
		}
		return inc.one2many(ss, method, forwarded(md, inc.n.name), nodes)
	case okNode:
		target, err := inc.n.c.target(node[0])
		if err != nil {
			return err
		}
		return inc.one2one(ss, method, forwarded(md, inc.n.name), target)
	default:
		return inc.one2one(ss, method, md, inc.n)
	}
}

// forwarded is the metadata a call proxied to another apid carries
// (backend/apid.go, APID.GetConnection): no node targets, and here the
// proxying node's name.
func forwarded(md metadata.MD, via string) metadata.MD {
	md = md.Copy()
	delete(md, ":authority")
	delete(md, "nodes")
	delete(md, "node")
	md.Set("proxyfrom", via)
	md.Set(mdVia, via)
	return md
}

// peerIdentity is the caller as the TLS connection shows it.
func peerIdentity(ctx context.Context) Identity {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return Identity{Insecure: true}
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return Identity{Insecure: true}
	}
	c := info.State.PeerCertificates[0]
	return Identity{CommonName: c.Subject.CommonName, Organizations: slices.Clone(c.Subject.Organization)}
}

// target resolves a "node"/"nodes" value: apid dials it on port 50000
// (backend/apid.go); here it is the node with that IP.
func (c *Cluster) target(name string) (*Node, error) {
	ip, err := netip.ParseAddr(name)
	if err != nil {
		// apid's backend dials hostnames too; the double knows nodes by IP.
		return nil, unreachable(name)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.byIPLocked(ip)
	if n == nil {
		return nil, unreachable(name)
	}
	return n, nil
}

// unreachable is what grpc answers for a target nothing listens on.
func unreachable(target string) error {
	return status.Errorf(codes.Unavailable,
		"connection error: desc = \"transport: Error while dialing: dial tcp %s: connect: connection refused\"",
		net.JoinHostPort(target, "50000"))
}

// backendConn is the connection to n's backend, if n is up and reachable.
func (n *Node) backendConn() (*grpc.ClientConn, error) {
	n.c.mu.Lock()
	inc, reachable := n.inc, n.reachable
	n.c.mu.Unlock()
	if inc == nil || !reachable || !inc.serving() {
		return nil, unreachable(n.addr.Addr().String())
	}
	return inc.conn, nil
}

// one2one forwards one call to target's backend and its answer back
// (grpc-proxy handlerOne2One).
func (inc *incarnation) one2one(ss grpc.ServerStream, method string, md metadata.MD, target *Node) error {
	conn, err := target.backendConn()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(ss.Context(), md))
	defer cancel()
	cs, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method, grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		return err
	}
	go func() {
		for {
			f := &rawFrame{}
			if err := ss.RecvMsg(f); err != nil {
				if errors.Is(err, io.EOF) {
					_ = cs.CloseSend()
				} else {
					cancel()
				}
				return
			}
			if err := cs.SendMsg(f); err != nil {
				return
			}
		}
	}()
	for i := 0; ; i++ {
		f := &rawFrame{}
		if err := cs.RecvMsg(f); err != nil {
			ss.SetTrailer(cs.Trailer())
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if i == 0 {
			if h, err := cs.Header(); err == nil {
				_ = ss.SendHeader(h)
			}
		}
		if err := ss.SendMsg(f); err != nil {
			return err
		}
	}
}

// one2many sends one call to every target and merges the answers, each
// message with the target in its metadata, a failed target as a message
// carrying only its error (backend/apid.go AppendInfo and BuildError;
// grpc-proxy handlerOne2Many). Unary answers are merged into one
// response, streamed ones forwarded as they come.
func (inc *incarnation) one2many(ss grpc.ServerStream, method string, md metadata.MD, targets []string) error {
	out, streaming, err := outputType(method)
	if err != nil {
		return status.Error(codes.Unimplemented, err.Error())
	}
	req := &rawFrame{}
	if err := ss.RecvMsg(req); err != nil {
		return err
	}
	ctx := metadata.NewOutgoingContext(ss.Context(), md)
	var (
		mu     sync.Mutex
		merged = out.New()
		wg     sync.WaitGroup
	)
	send := func(target string, payload []byte, callErr error) error {
		m := out.New()
		if callErr == nil {
			if err := proto.Unmarshal(payload, m.Interface()); err != nil {
				return err
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if streaming {
			setMetadata(m, target, callErr)
			f, err := proto.Marshal(m.Interface())
			if err != nil {
				return err
			}
			return ss.SendMsg(&rawFrame{payload: f})
		}
		appendMessages(merged, m, target, callErr)
		return nil
	}
	errs := make([]error, len(targets))
	for i, t := range targets {
		wg.Go(func() { errs[i] = callOne(ctx, inc.n.c, t, method, req, streaming, send) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	if streaming {
		return nil
	}
	f, err := proto.Marshal(merged.Interface())
	if err != nil {
		return err
	}
	return ss.SendMsg(&rawFrame{payload: f})
}

// callOne is one target's leg of a one2many call; send gets each answer
// or the target's error. Its own error is a failure of the proxy itself.
func callOne(ctx context.Context, c *Cluster, target, method string, req *rawFrame, streaming bool,
	send func(target string, payload []byte, err error) error,
) error {
	n, err := c.target(target)
	var conn *grpc.ClientConn
	if err == nil {
		conn, err = n.backendConn()
	}
	if err != nil {
		return send(target, nil, err)
	}
	cs, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: streaming}, method, grpc.ForceCodecV2(rawCodec{}))
	if err == nil {
		err = cs.SendMsg(req)
	}
	if err == nil {
		err = cs.CloseSend()
	}
	if err != nil {
		return send(target, nil, err)
	}
	for {
		f := &rawFrame{}
		if err := cs.RecvMsg(f); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return send(target, nil, err)
		}
		if err := send(target, f.payload, nil); err != nil {
			return err
		}
	}
}

// outputType is the response type of a method, from the descriptors
// machinery's generated packages register, and whether it streams.
func outputType(method string) (protoreflect.MessageType, bool, error) {
	svc, name, ok := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	if !ok {
		return nil, false, fmt.Errorf("method %q", method)
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return nil, false, fmt.Errorf("unknown service %q", svc)
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, false, fmt.Errorf("%q is no service", svc)
	}
	md := sd.Methods().ByName(protoreflect.Name(name))
	if md == nil {
		return nil, false, fmt.Errorf("unknown method %q", method)
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
	if err != nil {
		return nil, false, err
	}
	return mt, md.IsStreamingServer(), nil
}

// appendMessages appends the messages of one target's response m (field 1,
// the repeated replies of every machine API response) to merged, each
// with the target's metadata; a failed target adds one reply carrying its
// error.
func appendMessages(merged, m protoreflect.Message, target string, err error) {
	fd := merged.Descriptor().Fields().ByNumber(1)
	if fd == nil || !fd.IsList() || fd.Message() == nil {
		return
	}
	list := merged.Mutable(fd).List()
	if err != nil {
		e := list.NewElement()
		setMetadata(e.Message(), target, err)
		list.Append(e)
		return
	}
	src := m.Get(fd).List()
	for i := range src.Len() {
		e := src.Get(i)
		setMetadata(e.Message(), target, nil)
		list.Append(e)
	}
}

// setMetadata sets a reply's common.Metadata: the target as given, and the
// error if any.
func setMetadata(m protoreflect.Message, target string, err error) {
	fd := m.Descriptor().Fields().ByName("metadata")
	if fd == nil || fd.Message() == nil || fd.Message().FullName() != "common.Metadata" {
		return
	}
	meta := &common.Metadata{Hostname: target}
	if err != nil {
		meta.Error = err.Error()
		meta.Status = status.Convert(err).Proto()
	}
	m.Set(fd, protoreflect.ValueOfMessage(meta.ProtoReflect()))
}

// rawFrame is a message the proxy forwards without decoding it.
type rawFrame struct{ payload []byte }

// rawCodec passes frames through (grpc-proxy's codec).
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	f, ok := v.(*rawFrame)
	if !ok {
		return nil, fmt.Errorf("raw codec: %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(f.payload)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	f, ok := v.(*rawFrame)
	if !ok {
		return fmt.Errorf("raw codec: %T", v)
	}
	f.payload = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }
