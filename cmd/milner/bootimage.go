package main

import (
	"net/http"
	"strings"

	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/guard"
	"github.com/milner/milner/stacks/config"
)

// verifyBootImage checks the boot image when the preview creates the boot
// media (the only time libvirt reads the image: its source is ignored
// afterwards): a local image against its pinned digest; a remote one with
// a digest is downloaded into its verified local copy, which the program
// names as the media's source (config.LibvirtConfig.BootSource). The
// default factory image without a digest is downloaded by the provider,
// unverified: config validation warns about it.
func verifyBootImage(cfg *config.Config, report gate.Report) error {
	lv := cfg.Substrate.Libvirt
	if lv == nil || lv.BootImageSHA256 == "" {
		return nil
	}
	creates := false
	for _, c := range report.Delta(gate.Persistent).Creates {
		creates = creates || (c.Type == gate.TypeLibvirtVolume && strings.HasSuffix(c.Name, config.BootSuffix))
	}
	if !creates {
		return nil
	}
	var err error
	switch url := lv.BootImage; {
	case url == "":
		err = guard.FetchBootImage(http.DefaultClient, config.DefaultBootImage(cfg.Cluster.TalosVersion), lv.BootImageSHA256, config.BootImageCache(lv.BootImageSHA256))
	case strings.Contains(url, "://"):
		err = guard.FetchBootImage(http.DefaultClient, url, lv.BootImageSHA256, config.BootImageCache(lv.BootImageSHA256))
	default:
		err = guard.VerifyBootImage(url, lv.BootImageSHA256)
	}
	if err != nil {
		return refused("%v", err)
	}
	return nil
}
