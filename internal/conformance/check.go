package conformance

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"

	"github.com/milner/milner/internal/stackfile"
)

// Check is `milner check`: every rule evaluated on the committed stacks
// of the project at dir named names (none: every committed stack), with
// the validator tools in dir's .tools/bin, each figure printed on w (nil:
// none) as soon as it is evaluated. failed names the stacks whose rules
// fail; unchecked the tools missing for rules that could not be checked
// (a missing validator is not a broken stack).
func Check(w io.Writer, dir string, names ...string) (figures []Figure, failed, unchecked []string, err error) {
	stacks, err := stackfile.ReadDir(dir, names...)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, s := range stacks {
		ev, err := Collect(s)
		if err != nil {
			return nil, nil, nil, err
		}
		ev.Tools = filepath.Join(dir, ".tools", "bin")
		fig := Evaluate(s.Name, ev)
		figures = append(figures, fig)
		if w != nil {
			_, _ = fmt.Fprint(w, fig)
		}
		if !fig.OK() {
			failed = append(failed, s.Name)
		}
		for _, t := range fig.Unchecked() {
			if !slices.Contains(unchecked, t) {
				unchecked = append(unchecked, t)
			}
		}
	}
	return figures, failed, unchecked, nil
}
