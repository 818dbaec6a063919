package engine

// Credentials at rest: the state directory and the client files are the
// operator's alone (issue #14 item 4), and a stack name never becomes a path
// outside the repository.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"syscall"

	"gopkg.in/yaml.v3"
)

// stackName is what a stack name may be: Pulumi's own rule for stack names
// (letters, digits, '-', '_', '.'), starting with a letter or digit so that
// no name is "..", hidden or a flag, and short enough for a file name.
var stackName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$`)

// ValidStackName refuses a stack name that could name a path outside the
// repository (Pulumi.<stack>.yaml, clients/<stack>.kubeconfig) or that
// Pulumi would refuse later.
func ValidStackName(name string) error {
	if !stackName.MatchString(name) || filepath.Base(name) != name || name != filepath.Clean(name) {
		return fmt.Errorf("stack name %q: want letters, digits, '-', '_' or '.', starting with a letter or digit", name)
	}
	return nil
}

// PrivateDir makes dir a directory only its owner can enter (0700): created
// if missing, its mode tightened if it exists. A symbolic link (to anywhere)
// or a non-directory is refused rather than followed: the state and the
// passphrase salt would land wherever it points.
func PrivateDir(dir string) error {
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("private directory %s: %w", dir, err)
		}
	case err != nil:
		return fmt.Errorf("private directory %s: %w", dir, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("refused: %s is a symbolic link; the state directory must be a real directory (move the link away)", dir)
	case !fi.IsDir():
		return fmt.Errorf("refused: %s is not a directory", dir)
	}
	// MkdirAll honours the umask; Chmod sets exactly 0700 on a new or old one.
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("private directory %s: %w", dir, err)
	}
	return nil
}

// WritePrivateFile writes data to path with mode 0600, tightening the mode
// of a file that already exists. It never follows a symbolic link at path
// (O_NOFOLLOW): a link planted there cannot redirect credentials.
func WritePrivateFile(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return fmt.Errorf("refused: %s is a symbolic link; remove it, credentials are written only to a regular file", path)
		}
		return fmt.Errorf("write %s: %w", path, err)
	}
	if fi, err := f.Stat(); err == nil && !fi.Mode().IsRegular() {
		_ = f.Close()
		return fmt.Errorf("refused: %s is not a regular file", path)
	}
	if err := f.Chmod(0o600); err != nil {
		_ = f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// defaultPassphraseAllowed reports why a stack may not use the documented
// default passphrase, or nil when it may: the default protects nothing, so
// it is only for a stack whose stack file holds no secret and whose graph
// stops at the substrate (no Talos secrets bundle, no kubeconfig in state).
func defaultPassphraseAllowed(stack, configFile string, cfg map[string]string) error {
	if stack != LocalStack {
		return fmt.Errorf("only the %q stack has a default passphrase", LocalStack)
	}
	if cfg["milner:stopAfter"] != "substrate" {
		return fmt.Errorf("the default passphrase is only for a stack that stops after the substrate (milner:stopAfter: substrate); this one holds cluster secrets")
	}
	b, err := os.ReadFile(configFile)
	if err != nil {
		return err
	}
	var file struct {
		Config map[string]any `yaml:"config"`
	}
	if err := yaml.Unmarshal(b, &file); err != nil {
		return fmt.Errorf("%s: %w", configFile, err)
	}
	for k, v := range file.Config {
		if m, ok := v.(map[string]any); ok && len(m) == 1 && m["secure"] != nil {
			return fmt.Errorf("the default passphrase is only for a stack that holds no secret; %s has the secret %s", filepath.Base(configFile), k)
		}
	}
	return nil
}
