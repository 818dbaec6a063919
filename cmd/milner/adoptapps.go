package main

import (
	"fmt"
	"os"

	"github.com/milner/milner/internal/appsadopt"
	"github.com/milner/milner/stacks"
	"github.com/milner/milner/stacks/config"
)

// adoptApps adopts the apps layer of a stack that starts at it
// (internal/appsadopt): done reports that it ran, so the libvirt adoption
// does not. The import ids reach the program through run.
func adoptApps(o *op, run *stacks.RunOptions) (done bool, err error) {
	cfg, err := o.config()
	if err != nil || cfg.StartAt != config.LayerApps {
		if err == nil && cfg.Declares(config.LayerApps) {
			fmt.Fprintf(os.Stderr, "milner adopt: the apps layer of a stack that declares the Talos layer is not adopted here (its kubeconfig is a Talos output, unknown before the next up): see docs/runbooks/recover.md\n")
		}
		return false, err
	}
	cluster, err := appsadopt.NewCluster([]byte(o.file.Raw[config.Key(config.KubeconfigKey)]))
	if err != nil {
		return true, fmt.Errorf("stack %q: milner:%s: %w", o.st.Name(), config.KubeconfigKey, err)
	}
	r, err := appsadopt.Run(o.ctx, appsadopt.Options{
		Stack: o.st, Cluster: cluster, ProjectDir: o.file.Dir, Out: os.Stdout,
		SetAdopt: func(ids map[string]string) { run.Adopt = ids },
	})
	if err != nil {
		return true, err
	}
	return true, refuseList(r.Refusals, "%d live objects of the apps layer cannot be adopted",
		"adopting the apps layer of stack %q would take another chart's release (see above); nothing was changed", o.st.Name())
}
