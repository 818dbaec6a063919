package docs

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// LayoutHeading is the README section whose table names every top-level
// folder and every package under PackageDirs.
const LayoutHeading = "## Layout"

// PackageDirs are the folders whose every package the Layout table names
// (one row per package: the architecture's seams).
var PackageDirs = []string{"components", "internal"}

// Docs are the files CheckPaths reads, relative to the repo root:
// README.md and every Markdown file under docs/.
func Docs(root string) ([]string, error) {
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	return files, nil
}

var (
	// link is a Markdown inline link's target: [text](target).
	link = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// code is an inline code span.
	code = regexp.MustCompile("`([^`\n]+)`")
	// pathLike is a code span that is a path and nothing else.
	pathLike = regexp.MustCompile(`^[A-Za-z0-9_.*-]+(/[A-Za-z0-9_.*-]+)*/?$`)
)

// CheckPaths returns every path a doc cites that does not exist under
// root, as "<doc>:<line>: ...", and every folder or package the README's
// Layout table does not name. A doc cites a path with a relative link
// ([x](../state.md), resolved from the doc's folder) or with a code span
// that starts with one of the repository's top-level folders
// (`stacks/config/mirrors_test.go`, `tools/talos-validate-v*`, resolved
// from root). A code span whose second segment is no entry of that folder
// and that goes deeper is another repository's path, and not checked, only
// when its paragraph names that repository's tag, as a citation does
// (Talos v1.11.5 `internal/app/machined/...`); without a tag it is a
// missing path of this one (`tests/testdata/pve/opentofu`, cited once
// by the adopt runbook, was).
func CheckPaths(root string) ([]string, error) {
	top, err := topFolders(root)
	if err != nil {
		return nil, err
	}
	docs, err := Docs(root)
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, doc := range docs {
		f, err := os.Open(filepath.Join(root, doc))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var lines []string
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		err = sc.Err()
		_ = f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", doc, err)
		}
		tagged := taggedParagraphs(lines)
		for i, line := range lines {
			n := i + 1
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target, _, _ := strings.Cut(m[1], "#")
				if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				if !exists(filepath.Join(root, filepath.Dir(doc), target)) {
					problems = append(problems, fmt.Sprintf("%s:%d: links to %s, which does not exist", doc, n, m[1]))
				}
			}
			for _, m := range code.FindAllStringSubmatch(line, -1) {
				p := strings.TrimSpace(m[1])
				first, rest, ok := strings.Cut(p, "/")
				if !ok || !slices.Contains(top, first) || !pathLike.MatchString(p) {
					continue
				}
				second, deeper, _ := strings.Cut(strings.TrimSuffix(rest, "/"), "/")
				if deeper != "" && !strings.Contains(second, "*") && !exists(filepath.Join(root, first, second)) && tagged[i] {
					continue // another repository's tree, its tag in the paragraph
				}
				if goIdent(root, p) {
					continue // a package's identifier: `stacks/config.Load`
				}
				if !exists(filepath.Join(root, filepath.FromSlash(p))) {
					problems = append(problems, fmt.Sprintf("%s:%d: cites `%s`, which does not exist", doc, n, p))
				}
			}
		}
	}
	layout, err := checkLayout(root, top)
	if err != nil {
		return nil, err
	}
	sections, err := checkCitedSections(root)
	if err != nil {
		return nil, err
	}
	return append(append(problems, layout...), sections...), nil
}

// tag is a release tag as a citation of another repository names it
// (v1.11.5, v0.95.0).
var tag = regexp.MustCompile(`\bv\d+\.\d+`)

// taggedParagraphs reports, for each line, whether its paragraph (the
// lines between two blank ones) names a tag.
func taggedParagraphs(lines []string) []bool {
	out := make([]bool, len(lines))
	for start := 0; start < len(lines); {
		end := start
		for end < len(lines) && strings.TrimSpace(lines[end]) != "" {
			end++
		}
		has := slices.ContainsFunc(lines[start:end], tag.MatchString)
		for i := start; i < end; i++ {
			out[i] = has
		}
		start = end + 1
	}
	return out
}

// citedSection is how Milner's messages point to a doc's section:
// docs/apps.md "Where the charts come from", in a Go string (its quotes
// escaped) or a comment.
var citedSection = regexp.MustCompile(`(docs/[\w/.-]+\.md) \\?"([^"\\]+)\\?"`)

// checkCitedSections returns every doc section Milner's Go code cites (an
// error message's pointer) that the doc has no heading for. Tests are not
// read: a message a user sees is production code's.
func checkCitedSections(root string) ([]string, error) {
	var problems []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata"):
			return filepath.SkipDir
		case d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go"):
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for n, line := range strings.Split(string(b), "\n") {
			for _, m := range citedSection.FindAllStringSubmatch(line, -1) {
				doc, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(m[1])))
				if err != nil {
					problems = append(problems, fmt.Sprintf("%s:%d: cites %s, which does not exist", filepath.ToSlash(rel), n+1, m[1]))
					continue
				}
				if !hasHeading(string(doc), m[2]) {
					problems = append(problems, fmt.Sprintf("%s:%d: cites %s %q, which has no such heading", filepath.ToSlash(rel), n+1, m[1], m[2]))
				}
			}
		}
		return nil
	})
	return problems, err
}

// hasHeading reports whether a Markdown doc has a heading whose text is
// title (code spans as written: ## Chart mirror (`milner:chartMirrors`)).
func hasHeading(doc, title string) bool {
	for _, line := range strings.Split(doc, "\n") {
		if text, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " "); ok && strings.HasPrefix(line, "#") && strings.TrimSpace(text) == title {
			return true
		}
	}
	return false
}

// checkLayout returns every top-level folder and every package under
// PackageDirs that the first column of the README's Layout table does not
// name. A top-level folder is named by itself (`tests/`) or by a path in
// it (`components/helmapp`); a package only by its own path.
func checkLayout(root string, top []string) ([]string, error) {
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	_, section, ok := strings.Cut(string(readme), "\n"+LayoutHeading+"\n")
	if !ok {
		return []string{fmt.Sprintf("README.md: no %q section", LayoutHeading)}, nil
	}
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	named := map[string]bool{}
	for _, l := range strings.Split(section, "\n") {
		cells := strings.Split(l, "|")
		if len(cells) < 3 || !strings.HasPrefix(strings.TrimSpace(l), "|") {
			continue
		}
		for _, m := range code.FindAllStringSubmatch(cells[1], -1) {
			named[strings.TrimSuffix(m[1], "/")] = true
		}
	}
	var problems []string
	for _, d := range top {
		covered := named[d]
		for n := range named {
			covered = covered || strings.HasPrefix(n, d+"/")
		}
		if !covered {
			problems = append(problems, fmt.Sprintf("README.md: the %s table does not name the folder `%s/`", LayoutHeading, d))
		}
	}
	for _, dir := range PackageDirs {
		entries, err := os.ReadDir(filepath.Join(root, dir))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			pkg := dir + "/" + e.Name()
			if e.IsDir() && hasGo(filepath.Join(root, pkg)) && !named[pkg] {
				problems = append(problems, fmt.Sprintf("README.md: the %s table does not name the package `%s`", LayoutHeading, pkg))
			}
		}
	}
	return problems, nil
}

// topFolders are root's folders that belong to the repository: not hidden,
// not ignored by a root-anchored .gitignore entry (/bin/: build output).
func topFolders(root string) ([]string, error) {
	ignored := map[string]bool{}
	if b, err := os.ReadFile(filepath.Join(root, ".gitignore")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if l = strings.TrimSpace(l); strings.HasPrefix(l, "/") {
				ignored[strings.Trim(l, "/")] = true
			}
		}
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	var top []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") && !ignored[e.Name()] {
			top = append(top, e.Name())
		}
	}
	return top, nil
}

// exists reports whether path exists; a path with * exists when it
// matches something.
func exists(path string) bool {
	if strings.Contains(path, "*") {
		m, err := filepath.Glob(path)
		return err == nil && len(m) > 0
	}
	_, err := os.Stat(path)
	return err == nil
}

// hasGo reports whether dir holds a Go file.
func hasGo(dir string) bool {
	m, err := filepath.Glob(filepath.Join(dir, "*.go"))
	return err == nil && len(m) > 0
}

// goIdent reports whether p is a package path and one of its identifiers
// (`stacks/config.Load`): a folder, a dot, an exported name.
func goIdent(root, p string) bool {
	i := strings.LastIndex(p, ".")
	if i < 0 || i == len(p)-1 || strings.Contains(p[i:], "/") {
		return false
	}
	r := p[i+1]
	fi, err := os.Stat(filepath.Join(root, filepath.FromSlash(p[:i])))
	return r >= 'A' && r <= 'Z' && err == nil && fi.IsDir()
}
