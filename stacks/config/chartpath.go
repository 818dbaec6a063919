package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

// projectDir is the directory relative chart paths are read from: the
// project's root directory (where Pulumi.yaml is) when the source knows it
// (a *pulumi.Context the engine runs), else "" for the working directory,
// which is the project directory when the Pulumi CLI runs the program and
// for the tools that read a stack file from the repository.
func projectDir(src ConfigSource) string {
	if r, ok := src.(interface{ RootDirectory() string }); ok {
		return r.RootDirectory()
	}
	return ""
}

// chartMeta is what Milner reads of a local chart's Chart.yaml.
type chartMeta struct {
	Name    string `yaml:"name"`
	Version string `yaml:"version"`
}

// validateLocalChart checks a local chart (chart.path at path) before
// anything is touched: not also pinned to a repository, a directory (a
// relative path is read from root, the project directory) holding a
// Chart.yaml with a name and a version. It fills ch.Name from Chart.yaml,
// so that the profile rules see which chart it is.
func validateLocalChart(p *problems, path, root string, ch *ChartConfig) {
	var pinned []string
	for _, f := range []struct{ key, v string }{{"repo", ch.Repo}, {"name", ch.Name}, {"version", ch.Version}} {
		if f.v != "" {
			pinned = append(pinned, "chart."+f.key)
		}
	}
	if len(pinned) > 0 {
		p.addf(path+".path", "is exclusive with %s: a local chart is named and versioned by its own Chart.yaml", strings.Join(pinned, ", "))
	}
	dir := ch.Path
	where := ""
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(root, dir)
		where = " (a relative path is read from the project directory, where Pulumi.yaml is)"
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		p.addf(path+".path", "%q does not exist%s", ch.Path, where)
		return
	case err != nil:
		p.addf(path+".path", "%q: %v", ch.Path, err)
		return
	case !fi.IsDir():
		p.addf(path+".path", "%q is not a chart directory", ch.Path)
		return
	}
	b, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		p.addf(path+".path", "%q holds no Chart.yaml: not a chart directory", ch.Path)
		return
	}
	var meta chartMeta
	if err := yaml.Unmarshal(b, &meta); err != nil {
		p.addf(path+".path", "%q: Chart.yaml: %v", ch.Path, err)
		return
	}
	if meta.Name == "" || meta.Version == "" {
		p.addf(path+".path", "%q: Chart.yaml has no name or no version (Helm requires both)", ch.Path)
		return
	}
	if ch.Name == "" {
		ch.Name = meta.Name
	}
}
