// Package stackfile edits a committed Pulumi.<stack>.yaml in place, keeping
// its comments and layout: the one edit Milner makes to a stack file is
// recording the ids of existing objects it adopts (milner adopt).
package stackfile

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"slices"

	"gopkg.in/yaml.v3"
)

// Change is one edit of a stack file's config mapping.
type Change func(config *yaml.Node) error

// NodeField sets field of the node named node in milner:nodes to value
// (adopt's adoptId, holderAdoptId).
func NodeField(node, field, value string) Change {
	return func(config *yaml.Node) error { return setNodeField(config, node, field, value) }
}

// Adoption records what `milner adopt --all` adopts: each node's domain id
// as its adoptId, and each other object's id under its logical name in
// milner:substrate's libvirt.adopt.
func Adoption(nodes, objects map[string]string) Change {
	return func(config *yaml.Node) error {
		for _, n := range slices.Sorted(maps.Keys(nodes)) {
			if err := setNodeField(config, n, "adoptId", nodes[n]); err != nil {
				return err
			}
		}
		if len(objects) == 0 {
			return nil
		}
		sub := lookup(config, "milner:substrate")
		lv := lookup(sub, "libvirt")
		if lv == nil || lv.Kind != yaml.MappingNode {
			return fmt.Errorf("no milner:substrate.libvirt mapping")
		}
		adopt := lookup(lv, "adopt")
		if adopt == nil || adopt.Kind != yaml.MappingNode {
			adopt = &yaml.Node{Kind: yaml.MappingNode}
			setValue(lv, "adopt", adopt)
		}
		for _, logical := range slices.Sorted(maps.Keys(objects)) {
			setValue(adopt, logical, str(objects[logical]))
		}
		return nil
	}
}

// ClusterFlag sets the boolean field of the milner:cluster mapping to true
// (adopt's adoptBootstrap).
func ClusterFlag(field string) Change {
	return func(config *yaml.Node) error {
		cl := lookup(config, "milner:cluster")
		if cl == nil || cl.Kind != yaml.MappingNode {
			return fmt.Errorf("no milner:cluster mapping")
		}
		setValue(cl, field, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"})
		return nil
	}
}

// Edit is the one edit of a stack file: it applies change to the config
// mapping of the stack file at path, keeping its comments and layout, and
// writes the file back; it returns the previous bytes (to restore it if
// the caller's check fails).
func Edit(path string, change Change) ([]byte, error) {
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
	if err := change(lookup(doc.Content[0], "config")); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	return before, os.WriteFile(path, out.Bytes(), 0o644)
}

// setNodeField sets field of the node named node in milner:nodes.
func setNodeField(config *yaml.Node, node, field, value string) error {
	nodes := lookup(config, "milner:nodes")
	if nodes == nil || nodes.Kind != yaml.SequenceNode {
		return fmt.Errorf("no milner:nodes list")
	}
	var names []string
	for _, n := range nodes.Content {
		name := lookup(n, "name")
		if name == nil {
			continue
		}
		names = append(names, name.Value)
		if name.Value == node {
			setValue(n, field, str(value))
			return nil
		}
	}
	return fmt.Errorf("no node %q in milner:nodes (nodes: %v)", node, names)
}

// str is a double-quoted YAML string.
func str(v string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Style: yaml.DoubleQuotedStyle, Value: v}
}

// setValue sets key in mapping m to v, appending the key if m lacks it.
func setValue(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, v)
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
