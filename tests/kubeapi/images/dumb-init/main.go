// Command dumb-init is the stand-in for Yelp's dumb-init in the real-kubelet
// scenario's Vault image (tests/kubeapi node_test.go): Vault's entrypoint
// script starts with `#!/usr/bin/dumb-init /bin/sh` (vault v1.18.1
// .release/docker/docker-entrypoint.sh), so the kernel runs this with the
// shell, the script and its arguments. It runs them in its place: the
// script ends in `exec vault ...`, so Vault itself receives the kubelet's
// signals. What it leaves out of dumb-init is signal forwarding to a child
// and reaping, which nothing here needs: there is no child.
package main

import (
	"fmt"
	"os"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: dumb-init <program> [args...]")
		os.Exit(2)
	}
	err := syscall.Exec(os.Args[1], os.Args[1:], os.Environ())
	fmt.Fprintf(os.Stderr, "dumb-init: %s: %v\n", os.Args[1], err)
	os.Exit(1)
}
