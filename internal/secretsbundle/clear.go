package secretsbundle

import (
	"bytes"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Open reads the age-encrypted bundle file in with the age key file
// identity and returns the clear bundle, checked to parse.
func Open(in, identity string) ([]byte, error) {
	sealed, err := os.ReadFile(in)
	if err != nil {
		return nil, err
	}
	key, err := os.ReadFile(identity)
	if err != nil {
		return nil, err
	}
	plain, err := Decrypt(sealed, bytes.NewReader(key))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", in, err)
	}
	if _, err := Parse(plain); err != nil {
		return nil, fmt.Errorf("%s: %w", in, err)
	}
	return plain, nil
}

// ClearFile is the clear bundle where the Talos provider can read it and
// nothing can outlive this process. The provider reads its import id as a
// path, in its own process (terraform-provider-talos v0.10.1
// pkg/talos/talos_machine_secrets_resource.go ImportState: os.ReadFile of
// req.ID), so the bundle must be a path; a file in $TMPDIR survives a
// SIGKILL of milner (no deferred removal runs). A memfd lives in memory
// only and is freed with the last descriptor: its path is this process's
// /proc/<pid>/fd/<n>, which another process of the same user opens as a new
// description of the same file (proc(5)), and which names nothing once
// milner exits, however it exits.
type ClearFile struct {
	f *os.File
}

// NewClearFile holds plain in a memfd, sealed against writes and resizing.
func NewClearFile(plain []byte) (*ClearFile, error) {
	fd, err := unix.MemfdCreate("milner-secrets-bundle", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "milner-secrets-bundle")
	if _, err := f.Write(plain); err != nil {
		_ = f.Close()
		return nil, err
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("seal the memfd: %w", err)
	}
	return &ClearFile{f: f}, nil
}

// Path is where another process of this user reads the bundle while the
// ClearFile is open.
func (c *ClearFile) Path() string { return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), c.f.Fd()) }

// Close frees the bundle.
func (c *ClearFile) Close() error { return c.f.Close() }
