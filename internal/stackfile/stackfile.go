// Package stackfile edits a committed Pulumi.<stack>.yaml in place, keeping
// its comments and layout: the one edit Milner makes to a stack file is
// recording an adopted node's existing VM id (milner adopt).
package stackfile

import (
	"bytes"
	"fmt"
	"os"

	"gopkg.in/yaml.v3"
)

// SetNodeField sets field of the node named node in the milner:nodes list
// of the stack file at path to value, and returns the file's previous bytes
// (to restore it if the caller's check fails).
func SetNodeField(path, node, field, value string) ([]byte, error) {
	before, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(before, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return nil, fmt.Errorf("%s: empty stack file", path)
	}
	nodes := lookup(lookup(doc.Content[0], "config"), "milner:nodes")
	if nodes == nil || nodes.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("%s: no milner:nodes list", path)
	}
	var names []string
	for _, n := range nodes.Content {
		name := lookup(n, "name")
		if name == nil {
			continue
		}
		names = append(names, name.Value)
		if name.Value != node {
			continue
		}
		if v := lookup(n, field); v != nil {
			v.Value, v.Tag, v.Style = value, "!!str", yaml.DoubleQuotedStyle
		} else {
			n.Content = append(n.Content,
				&yaml.Node{Kind: yaml.ScalarNode, Value: field},
				&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Style: yaml.DoubleQuotedStyle, Value: value})
		}
		var out bytes.Buffer
		enc := yaml.NewEncoder(&out)
		enc.SetIndent(2)
		if err := enc.Encode(&doc); err != nil {
			return nil, err
		}
		return before, os.WriteFile(path, out.Bytes(), 0o644)
	}
	return nil, fmt.Errorf("%s: no node %q in milner:nodes (nodes: %v)", path, node, names)
}

// lookup returns the value of key in a mapping node, or nil.
func lookup(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}
