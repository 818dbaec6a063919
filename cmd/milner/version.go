package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// versionModules are the dependencies whose versions `milner version` shows.
var versionModules = []string{
	"github.com/pulumi/pulumi/pkg/v3",
	"github.com/dmacvicar/terraform-provider-libvirt",
	"github.com/pulumi/pulumi-libvirt/sdk",
	"github.com/muhlba91/pulumi-proxmoxve/sdk/v7",
	"github.com/pulumiverse/pulumi-talos/sdk",
	"github.com/pulumi/pulumi-kubernetes/sdk/v4",
}

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print milner's version and the engine and SDK versions it links",
		RunE: func(cmd *cobra.Command, _ []string) error {
			info, ok := debug.ReadBuildInfo()
			if !ok {
				return fmt.Errorf("no build information in this binary")
			}
			fmt.Printf("milner %s (%s)\n", info.Main.Version, info.GoVersion)
			for _, d := range info.Deps {
				for _, m := range versionModules {
					if d.Path == m {
						fmt.Printf("  %s %s\n", d.Path, d.Version)
					}
				}
			}
			return nil
		},
	}
}
