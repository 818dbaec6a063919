package gate

import "fmt"

// CheckRemoved refuses a plan that deletes the VM of a node other than the
// one named with --remove (removed: "" when none is). A node leaves the
// cluster only through `milner up --remove <node>`: drained, its etcd
// member removed, shut down, then its VM deleted and its volumes retained
// on the host; a node that merely vanished from milner:nodes would lose
// its VM without any of that (and its protected volumes refuse the delete
// anyway, in the layer rules).
func CheckRemoved(r Report, removed, stack string) []Refusal {
	var out []Refusal
	for _, c := range r.Delta(Disposable).Of(Delete) {
		if c.Node == "" || c.Node == removed {
			continue
		}
		out = append(out, Refusal{c.Node,
			fmt.Sprintf("node %s is no longer in milner:nodes and its VM would be deleted without draining it or leaving etcd", c.Node),
			fmt.Sprintf("to remove it: `milner up --stack %s --remove %s` (its volumes stay on the host); otherwise restore it in milner:nodes", stack, c.Node)})
	}
	return out
}
