package pipeline

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/milner/milner/internal/engine"
	"github.com/milner/milner/internal/secretgen"
	"github.com/milner/milner/internal/stackfile"
)

// GenerateSecrets is `milner secrets generate`: the secrets stack's config
// needs (secretgen.ForStack), each written 0600 into out (created 0700),
// each named on w as it is written; it returns their names. It refuses,
// before writing anything, an out inside the project directory (symbolic
// links resolved: secrets never go into the repository) and an out that
// holds any of the files already (a secret is never overwritten).
func GenerateSecrets(w io.Writer, project, stack, out string) ([]string, error) {
	s, err := stackfile.Read(stackfile.Path(project, stack), nil)
	if err != nil {
		return nil, err
	}
	if in, err := within(out, project); err != nil {
		return nil, err
	} else if in {
		return nil, Refused("--out %s is inside the project directory %s: secrets never go into the repository; choose a directory outside it", out, project)
	}
	files, err := secretgen.ForStack(s.Config)
	if err != nil {
		return nil, err
	}
	for _, g := range files {
		if _, err := os.Lstat(filepath.Join(out, g.Name)); err == nil {
			return nil, Refused("%s exists: generate never overwrites a secret; nothing was written (remove it, or choose another --out)", filepath.Join(out, g.Name))
		}
	}
	if err := os.MkdirAll(out, 0o700); err != nil {
		return nil, err
	}
	_, _ = fmt.Fprintf(w, "milner secrets: wrote to %s (keep it out of git):\n", out)
	var names []string
	for _, g := range files {
		// O_EXCL: a file that appeared since the check above is refused, not truncated.
		if err := engine.CreatePrivateFile(filepath.Join(out, g.Name), g.Data); err != nil {
			return nil, err
		}
		_, _ = fmt.Fprintf(w, "  %-24s %s\n", g.Name, g.Use)
		names = append(names, g.Name)
	}
	return names, nil
}

// within reports whether path is dir or below it, after resolving symbolic
// links of the part of path that exists.
func within(path, dir string) (bool, error) {
	d, err := realPath(dir)
	if err != nil {
		return false, err
	}
	p, err := realPath(path)
	if err != nil {
		return false, err
	}
	rel, err := filepath.Rel(d, p)
	if err != nil {
		return false, err
	}
	return rel == "." || (rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))), nil
}

// realPath is path made absolute with the symbolic links of its longest
// existing prefix resolved.
func realPath(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	rest := ""
	for p := abs; ; p = filepath.Dir(p) {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(r, rest), nil
		}
		if p == filepath.Dir(p) {
			return abs, nil
		}
		rest = filepath.Join(filepath.Base(p), rest)
	}
}
