package substrate

import (
	"regexp"
)

// ownerTagRe finds an owner tag in a libvirt domain's description.
var ownerTagRe = regexp.MustCompile(`milner-owner=([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)`)

// OwnerTag is the tag a stack writes into the description of every libvirt
// domain it creates, "milner-owner=<project>/<stack>": libvirt keeps a
// domain's description across redefines, so an object left behind by a
// crash still says whose it is, and the guard never offers one stack
// another stack's machine (pools, networks and volumes have no free-text
// field in libvirt: volumes are matched by their pool, pools by their path).
func OwnerTag(project, stack string) string { return "milner-owner=" + project + "/" + stack }

// OwnerOf returns the "<project>/<stack>" a description's owner tag names,
// or "" for an untagged description.
func OwnerOf(description string) string {
	m := ownerTagRe.FindStringSubmatch(description)
	if m == nil {
		return ""
	}
	return m[1]
}
