package config

// Lists joined into one setting (issue #49, class 3). Woodpecker reads
// some settings as one comma-separated string: Milner joins
// woodpecker.admins with "," into WOODPECKER_ADMIN (stacks/woodpecker.go),
// and WOODPECKER_ORGS, the organizations open registration admits, is one
// such string too (Woodpecker 3 cmd/server flags: StringSlice flags read
// from one variable, split at ","). An entry holding a comma is two
// entries; an entry with a newline, a blank or a '*' is no forge name; an
// empty entry or list names nobody. Each entry must be one forge name.

import (
	"fmt"
	"regexp"
	"strings"
)

// forgeName is a user or organization name as the forges Woodpecker
// supports allow them (Gitea/Forgejo: letters, digits, '-', '_', '.';
// GitHub: letters, digits, '-'; GitLab: letters, digits, '-', '_', '.').
var forgeName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,98}[A-Za-z0-9_])?$`)

// checkJoinedLists is the rule of this file.
func (c *Config) checkJoinedLists(p *problems) {
	for i, a := range c.Apps {
		w := a.Woodpecker
		if w == nil {
			continue
		}
		ap := fmt.Sprintf("%s[%d]", Key("apps"), i)
		if w.Admins != nil && len(w.Admins) == 0 {
			p.addf(ap+".woodpecker.admins", "is an empty list: it names no admin; remove the key, or name the forge users")
		}
		seen := map[string]int{}
		for j, name := range w.Admins {
			at := fmt.Sprintf("%s.woodpecker.admins[%d]", ap, j)
			if !forgeName.MatchString(name) {
				p.addf(at, "%q is not one forge user name: Milner joins the admins with \",\" into WOODPECKER_ADMIN, so a comma makes two admins, and a blank, newline or '*' names no user", name)
			} else if k, dup := seen[name]; dup {
				p.addf(at, "%q is also admins[%d]", name, k)
			} else {
				seen[name] = j
			}
		}
		for _, comp := range []string{"server", "agent"} {
			path := comp + ".env.WOODPECKER_ORGS"
			v, ok := lookupPath(a.Values, path)
			if !ok {
				continue
			}
			orgs := strings.Split(scalar(v), ",")
			for _, org := range orgs {
				if !forgeName.MatchString(strings.TrimSpace(org)) {
					p.addf(ap+".values."+path, "%q does not list organizations (one forge name between each \",\"): an entry %q names none, so the filter on open registration admits other accounts than you mean", scalar(v), org)
					break
				}
			}
		}
	}
}
