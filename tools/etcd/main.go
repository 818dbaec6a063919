// Command etcd is etcd's own server main (go.etcd.io/etcd/server/v3/etcdmain),
// pinned by this module's go.mod and built into .tools/bin by scripts/tools.sh
// for the real-API tests: kube-apiserver keeps its objects in it.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
