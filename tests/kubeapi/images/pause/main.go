// Command pause is the stand-in pod sandbox image of the real-kubelet
// scenario (tests/kubeapi node_test.go): it holds the pod's namespaces open
// until it is told to stop, and reaps the zombies of the pid namespace it
// leads, as Kubernetes' own pause (build/pause/linux/pause.c) does. No
// pause image can be pulled here; this one is built with the tests' Go.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
