package stackfile

// The stack file as a reviewer reads it (issue #49, class 4). YAML can
// make a value other than what its text shows: a tag (!!binary decodes
// base64, so the program gets bytes nobody read), an alias or a merge key
// (the value is written elsewhere, under another key), a float that is
// infinity or NaN, an escape that hides a line break or a NUL, an
// invisible or bidirectional control character (text that renders in
// another order than it is read). Pulumi's loader accepts all of them and
// passes on the decoded value. Each is refused, naming its config path;
// a block scalar (| or >) shows its line breaks and keeps them.

import (
	"fmt"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/milner/milner/stacks/config"
)

// identKey is a mapping key written as .key in a config path.
var identKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

// nonFinite is YAML 1.2's spelling of a float infinity or NaN.
var nonFinite = regexp.MustCompile(`^[-+]?\.(inf|Inf|INF)$|^\.(nan|NaN|NAN)$`)

// reviewed reads the config block of a stack file's bytes and returns a
// problem for each value YAML makes into something its text does not show.
func reviewed(b []byte) []string {
	var doc yaml.Node
	if yaml.Unmarshal(b, &doc) != nil || len(doc.Content) == 0 {
		return nil // Pulumi's loader reports a file that does not parse
	}
	root := doc.Content[0]
	var out []string
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value != "config" {
			continue
		}
		cfg := root.Content[i+1]
		if cfg.Kind != yaml.MappingNode {
			return nil
		}
		for j := 0; j+1 < len(cfg.Content); j += 2 {
			k := cfg.Content[j].Value
			if !strings.Contains(k, ":") {
				k = config.Key(k) // a key without a namespace is the project's
			}
			walkReviewed(cfg.Content[j], k, true, &out)
			walkReviewed(cfg.Content[j+1], k, false, &out)
		}
	}
	return out
}

func walkReviewed(n *yaml.Node, at string, key bool, out *[]string) {
	add := func(format string, args ...any) { *out = append(*out, at+": "+fmt.Sprintf(format, args...)) }
	what := "its value"
	if key {
		what = "its key"
	}
	if n.Style&yaml.TaggedStyle != 0 {
		add("%s carries the YAML tag %s, which makes the value something other than its text shows (!!binary decodes it); write the value itself", what, n.Tag)
		return
	}
	switch n.Kind {
	case yaml.AliasNode:
		add("is an alias (*%s) of a value written elsewhere; write the value here, where it is reviewed", n.Value)
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Tag == "!!merge" || k.Value == "<<" && k.Style == 0 {
				add("holds a merge key (<<), which takes values written elsewhere; write the keys here, where they are reviewed")
				continue
			}
			kp := at + "[" + k.Value + "]"
			if identKey.MatchString(k.Value) {
				kp = at + "." + k.Value
			}
			walkReviewed(k, kp, true, out)
			walkReviewed(n.Content[i+1], kp, false, out)
		}
	case yaml.SequenceNode:
		for i, e := range n.Content {
			walkReviewed(e, fmt.Sprintf("%s[%d]", at, i), false, out)
		}
	case yaml.ScalarNode:
		switch {
		case n.Tag == "!!float" && nonFinite.MatchString(n.Value):
			add("%s is %s, a float no setting takes (infinity or not a number); write the number", what, n.Value)
		case strings.ContainsFunc(n.Value, hidden):
			add("%s holds a control or invisible character (%q), which a reviewer does not see or sees elsewhere; remove it", what, firstHidden(n.Value))
		case strings.ContainsAny(n.Value, "\n\r") && (key || n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) == 0):
			add("%s holds a line break written as an escape or in quotes, which reads as one line; write it as a block scalar (|) if it is meant", what)
		}
	}
}

// hidden reports a character that a reviewer does not see as what it is:
// a control character other than tab and line breaks (NUL among them),
// and the invisible and bidirectional formatting characters (Unicode's
// "Trojan Source" set: U+200B-U+200F, U+202A-U+202E, U+2060-U+2064,
// U+2066-U+2069, U+FEFF).
func hidden(r rune) bool {
	switch {
	case r == '\t' || r == '\n' || r == '\r':
		return false
	case r < 0x20 || r >= 0x7f && r < 0xa0:
		return true
	case r >= 0x200b && r <= 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2060 && r <= 0x2064, r >= 0x2066 && r <= 0x2069, r == 0xfeff:
		return true
	}
	return false
}

func firstHidden(s string) string {
	for _, r := range s {
		if hidden(r) {
			return string(r)
		}
	}
	return ""
}
