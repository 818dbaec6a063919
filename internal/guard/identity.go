package guard

import "fmt"

// Stale compares identities, not names: for each declared object the state
// records (stateID returns its provider id, "" when absent), a live object
// of the same name with another id means the state is not the host's
// present: typically a state restored from an older backup, after which a
// domain was replaced (new UUID) or a volume recreated (new key). A
// preview without refresh, and the name-based Check, would both pass, and
// the next up would act on objects that no longer exist. It refuses before
// anything changes.
func Stale(stack string, declared []Declared, stateID func(typ, logical string) string, live []Object) []Finding {
	byKey := map[string]Object{}
	for _, o := range live {
		byKey[liveKey(o.Type, o.Pool, o.Name)] = o
	}
	var out []Finding
	for _, d := range declared {
		id := stateID(d.Type, d.Logical)
		o, ok := byKey[liveKey(d.Type, d.Pool, d.Name)]
		if id == "" || !ok || o.ID == id {
			continue
		}
		out = append(out, Finding{
			Problem: fmt.Sprintf("the state of stack %q records %s %q (%s) as %s, but the host's %q is %s: the state is older than the host (restored from an older backup?)", stack, kind(d.Type), d.Name, d.Logical, id, d.Name, o.ID),
			Fix:     staleFix(stack),
		})
	}
	return out
}

// staleFix is what to do about a state older than the host.
func staleFix(stack string) string {
	return fmt.Sprintf("if a restore caused it, `milner state restore --stack %s --backup latest` undoes it; otherwise `milner refresh --stack %s` records what lives, and `milner preview --stack %s` shows the rest", stack, stack, stack)
}
