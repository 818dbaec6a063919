package vault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/term"
)

// DefaultAuditPath is the audit log file on the chart's audit PVC
// (server.auditStorage mounts it at /vault/audit).
const DefaultAuditPath = "/vault/audit/vault_audit.log"

// Dial is NewClient with the CA certificates read from caFile.
func Dial(addr, caFile string) (*Client, error) {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	return NewClient(addr, ca)
}

// UnsealFrom enters key shares until Vault is unsealed (UnsealWith), read
// from sharesFile as secretSource reads them; flag is the command-line
// flag that names the file.
func (c *Client) UnsealFrom(ctx context.Context, sharesFile, flag string) (SealStatus, error) {
	next, closeFn, err := secretSource(sharesFile, flag)
	if err != nil {
		return SealStatus{}, err
	}
	defer closeFn()
	return c.UnsealWith(ctx, func(s SealStatus) (string, error) {
		return next(fmt.Sprintf("key share %d of %d (empty to stop): ", s.Progress+1, s.T))
	})
}

// ReadToken reads one token from tokenFile as secretSource reads it; flag
// is the command-line flag that names the file.
func ReadToken(tokenFile, flag string) (string, error) {
	next, closeFn, err := secretSource(tokenFile, flag)
	if err != nil {
		return "", err
	}
	defer closeFn()
	token, err := next("Vault token: ")
	if errors.Is(err, io.EOF) {
		return "", errors.New("empty token")
	}
	return token, err
}

// secretSource returns where secrets (key shares, a token) come from, one
// per line: a file, stdin ("-"), or, without path, the terminal, asked one
// at a time with prompt and without echo. next returns io.EOF at the end
// (on the terminal: an empty answer).
func secretSource(path, flag string) (next func(prompt string) (string, error), closeFn func(), err error) {
	switch path {
	case "-":
		return linesOf(os.Stdin), func() {}, nil
	case "":
		fd := int(os.Stdin.Fd())
		if !term.IsTerminal(fd) {
			return nil, nil, fmt.Errorf("stdin is not a terminal: give --%s <file> or --%s -", flag, flag)
		}
		return func(prompt string) (string, error) {
			fmt.Fprint(os.Stderr, prompt)
			b, err := term.ReadPassword(fd)
			fmt.Fprintln(os.Stderr)
			if s := strings.TrimSpace(string(b)); s != "" || err != nil {
				return s, err
			}
			return "", io.EOF
		}, func() {}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	return linesOf(f), func() { _ = f.Close() }, nil // read-only: nothing to flush
}

// linesOf reads the non-blank lines of r (Shares).
func linesOf(r io.Reader) func(string) (string, error) {
	shares := Shares(r)
	return func(string) (string, error) { return shares(SealStatus{}) }
}
