package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// MinFactLength is the shortest sentence CheckRepeats compares: shorter
// ones ("See the runbook.") say too little to be a fact told twice.
const MinFactLength = 70

var (
	// fence is a fenced code block: commands may be shown in several places.
	fence = regexp.MustCompile("(?s)```.*?```")
	// sentenceEnd splits prose at a sentence's end, a table cell's edge, a
	// blank line, a heading and a list item.
	sentenceEnd = regexp.MustCompile(`[.!?]\s+|\||\n\s*\n|\n\s*(#+|[-*]|\d+\.)\s`)
	space       = regexp.MustCompile(`\s+`)
)

// CheckRepeats returns each sentence of MinFactLength characters or more
// (white space folded, case ignored, code blocks left out) that two of the
// docs tell, as "<doc>, <doc>: tells again ...": a fact is told once, in
// one place, and linked from the others. The generated docs (File,
// CLIFile) are left out: they render one source, the stack files and the
// CLI's help.
func CheckRepeats(root string) ([]string, error) {
	files, err := Docs(root)
	if err != nil {
		return nil, err
	}
	where := map[string][]string{}
	var order []string
	for _, f := range files {
		if f == File || f == CLIFile {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, f))
		switch {
		case os.IsNotExist(err): // a repository without a README
			continue
		case err != nil:
			return nil, err
		}
		for _, s := range sentenceEnd.Split(fence.ReplaceAllString(string(b), ""), -1) {
			s = strings.ToLower(strings.TrimSpace(space.ReplaceAllString(s, " ")))
			if len(s) < MinFactLength || slices.Contains(where[s], f) {
				continue
			}
			if where[s] == nil {
				order = append(order, s)
			}
			where[s] = append(where[s], f)
		}
	}
	var problems []string
	for _, s := range order {
		if fs := where[s]; len(fs) > 1 {
			problems = append(problems, fmt.Sprintf("%s: tells again %q", strings.Join(fs, ", "), s))
		}
	}
	return problems, nil
}
