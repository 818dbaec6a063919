package stacks_test

import (
	"fmt"
	"testing"

	"github.com/milner/milner/internal/offline"
	"github.com/milner/milner/stacks"
)

// scaledConfig is baseConfig with n nodes (three control planes, the rest
// workers) on a /16, so 300 nodes fit.
func scaledConfig(n int) obj {
	c := baseConfig()
	at(c, "cluster")["vip"] = "10.9.0.240"
	c["network"] = obj{"mode": "isolated", "cidr": "10.9.0.0/16",
		"dhcpRange": obj{"start": "10.9.200.1", "end": "10.9.200.250"}}
	var nodes []any
	for i := range n {
		role := "worker"
		if i < 3 {
			role = "controlplane"
		}
		nodes = append(nodes, obj{
			"name": fmt.Sprintf("n-%d", i), "role": role,
			"address": fmt.Sprintf("10.9.%d.%d", 1+i/250, 1+i%250),
			"mac":     fmt.Sprintf("52:54:00:09:%02x:%02x", i/256, i%256),
		})
	}
	c["nodes"] = nodes
	return c
}

// BenchmarkProgram runs the whole program under the recording mock; the
// per-node metrics show whether program cost stays linear in nodes.
func BenchmarkProgram(b *testing.B) {
	for _, n := range []int{3, 30, 300} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			cfg := raw(b, scaledConfig(n))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := offline.Run(stacks.Program, "bench", cfg, "milner:vaultToken"); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/node")
		})
	}
}
