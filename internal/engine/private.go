package engine

// Credentials at rest: files and directories that hold credentials are the
// operator's alone (issue #14 item 4).

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

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
