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
	return writePrivate(path, data, os.O_TRUNC)
}

// CreatePrivateFile writes data to a new file at path with mode 0600: one
// that exists (a link included) is an error, never overwritten, decided
// by the kernel as it creates the file (O_EXCL), so nothing created
// between a check and the write is truncated.
func CreatePrivateFile(path string, data []byte) error {
	err := writePrivate(path, data, os.O_EXCL)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("refused: %s exists; it is never overwritten", path)
	}
	return err
}

// writePrivate opens path for writing with O_CREATE, O_NOFOLLOW and flag.
func writePrivate(path string, data []byte, flag int) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|syscall.O_NOFOLLOW|flag, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return err
		}
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
