package main

import (
	"strings"

	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/guard"
	"github.com/milner/milner/stacks/config"
)

// verifyBootImage checks a local boot image against its pinned digest when
// the preview creates the boot media (the only time libvirt reads the image:
// its source is ignored afterwards). A remote image is downloaded by the
// provider itself and cannot be checked here.
func verifyBootImage(cfg *config.Config, report gate.Report) error {
	lv := cfg.Substrate.Libvirt
	if lv == nil || lv.BootImageSHA256 == "" || strings.Contains(lv.BootImage, "://") || lv.BootImage == "" {
		return nil
	}
	for _, c := range report.Delta(gate.Persistent).Creates {
		if c.Type == guard.TypeVolume && strings.HasSuffix(c.Name, config.BootSuffix) {
			return guard.VerifyBootImage(lv.BootImage, lv.BootImageSHA256)
		}
	}
	return nil
}
