package conformance

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/milner/milner/internal/stackfile"
)

// Check is `milner check`: every rule evaluated on the committed stacks
// of the project at dir named names (none: every committed stack), with
// the validator tools in dir's .tools/bin, each figure printed on w (nil:
// none) as soon as it is evaluated. failed names the stacks whose rules
// fail.
func Check(w io.Writer, dir string, names ...string) (figures []Figure, failed []string, err error) {
	stacks, err := stackfile.ReadDir(dir, names...)
	if err != nil {
		return nil, nil, err
	}
	for _, s := range stacks {
		ev, err := Collect(s)
		if err != nil {
			return nil, nil, err
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
	}
	return figures, failed, nil
}
