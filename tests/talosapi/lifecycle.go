package talosapi

import (
	"slices"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// lifecycle is LifecycleService, new in v1.13 (internal/app/lifecycle/
// lifecycle.go, Service): Upgrade installs the installer image's Talos
// for the next boot, streaming progress and an exit code, and does not
// reboot (talosctl drains and reboots next). The image must have been
// pulled into the containerd instance named (runInstallerContainer runs
// it from there).
type lifecycle struct {
	machine.UnimplementedLifecycleServiceServer
	n *Node
}

// Upgrade is Service.Upgrade on an installed machine.
func (l *lifecycle) Upgrade(in *machine.LifecycleServiceUpgradeRequest, srv grpc.ServerStreamingServer[machine.LifecycleServiceUpgradeResponse]) error {
	image := in.GetSource().GetImageName()
	if image == "" {
		return status.Error(codes.InvalidArgument, "installer image name is required")
	}
	n := l.n
	n.c.mu.Lock()
	pulled := slices.Contains(n.images[imageKey(in.GetContainerd())], image)
	n.c.mu.Unlock()
	if !pulled {
		return status.Errorf(codes.Internal, "upgrade failed: failed to get image %q: image %q: not found", image, image)
	}
	for _, msg := range []string{"pulling " + image, "validating " + image, "upgrading the boot assets"} {
		if err := srv.Send(&machine.LifecycleServiceUpgradeResponse{Progress: &machine.LifecycleServiceInstallProgress{
			Response: &machine.LifecycleServiceInstallProgress_Message{Message: msg}}}); err != nil {
			return err
		}
	}
	n.c.mu.Lock()
	n.installLocked(image)
	n.c.mu.Unlock()
	return srv.Send(&machine.LifecycleServiceUpgradeResponse{Progress: &machine.LifecycleServiceInstallProgress{
		Response: &machine.LifecycleServiceInstallProgress_ExitCode{ExitCode: 0}}})
}

// images is ImageService, new in v1.13: Pull records the image in the
// containerd instance named and answers its name, after WithInstallerPull
// when the image is not there yet (the double pulls nothing; FailCalls
// makes a pull fail).
type images struct {
	machine.UnimplementedImageServiceServer
	n *Node
}

// Pull is ImageService.Pull.
func (s *images) Pull(in *machine.ImageServicePullRequest, srv grpc.ServerStreamingServer[machine.ImageServicePullResponse]) error {
	ref := in.GetImageRef()
	if ref == "" || strings.ContainsAny(ref, " \t") {
		return status.Errorf(codes.InvalidArgument, "invalid image reference %q", ref)
	}
	n := s.n
	n.c.mu.Lock()
	key, pull := imageKey(in.GetContainerd()), n.c.opts.installerPull
	if slices.Contains(n.images[key], ref) {
		pull = 0
	}
	n.c.mu.Unlock()
	select {
	case <-srv.Context().Done():
		return status.FromContextError(srv.Context().Err()).Err()
	case <-time.After(pull): // WithInstallerPull
	}
	n.c.mu.Lock()
	if n.images == nil {
		n.images = map[string][]string{}
	}
	if !slices.Contains(n.images[key], ref) {
		n.images[key] = append(n.images[key], ref)
	}
	n.c.mu.Unlock()
	return srv.Send(&machine.ImageServicePullResponse{Response: &machine.ImageServicePullResponse_Name{Name: ref}})
}

// imageKey names a containerd instance.
func imageKey(c *common.ContainerdInstance) string {
	return c.GetDriver().String() + "/" + c.GetNamespace().String()
}
