package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"golang.org/x/term"

	"github.com/milner/milner/internal/vault"
)

func init() {
	register("vault", "Vault's seal status, unseal from key shares you supply, enable the audit device (status|unseal|audit)", runVault)
}

// DefaultAuditPath is the audit log file on the chart's audit PVC
// (server.auditStorage mounts it at /vault/audit).
const DefaultAuditPath = "/vault/audit/vault_audit.log"

// runVault is `milner vault status|unseal|audit --addr <https://...> --ca-file <ca.crt>`.
// Key shares and tokens are read from a file, stdin ("-") or the terminal
// without echo, used once, and never written anywhere.
func runVault(args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return errors.New("want an action: status, unseal or audit")
	}
	action := args[0]
	fs := flag.NewFlagSet("vault "+action, flag.ContinueOnError)
	addr := fs.String("addr", "", "Vault's https:// address, e.g. https://127.0.0.1:8200 through `kubectl -n vault port-forward vault-0 8200` (required)")
	caFile := fs.String("ca-file", "", "the CA certificate that issued Vault's certificate (the value of milner:vaultTlsCa) (required)")
	shares := fs.String("shares-file", "", "unseal: a file of key shares, one per line, or - for stdin (default: ask on the terminal)")
	tokenFile := fs.String("token-file", "", "audit: a file holding a token allowed to enable audit devices, or - for stdin (default: ask on the terminal)")
	auditPath := fs.String("path", DefaultAuditPath, "audit: the audit log file")
	if err := parseFlags(fs, args[1:], "addr", "ca-file"); err != nil {
		return err
	}
	ca, err := os.ReadFile(*caFile)
	if err != nil {
		return err
	}
	c, err := vault.NewClient(*addr, ca)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	switch action {
	case "status":
		s, err := c.SealStatus(ctx)
		if err != nil {
			return err
		}
		fmt.Println(s)
		if s.Sealed {
			return fmt.Errorf("vault at %s is sealed; unseal it: milner vault unseal --addr %s --ca-file %s", *addr, *addr, *caFile)
		}
		return nil
	case "unseal":
		next, closeFn, err := shareSource(*shares)
		if err != nil {
			return err
		}
		defer closeFn()
		s, err := c.UnsealWith(ctx, next)
		if err != nil {
			return err
		}
		fmt.Println(s)
		return nil
	case "audit":
		token, err := readSecret(*tokenFile, "Vault token: ")
		if err != nil {
			return err
		}
		enabled, err := c.EnableFileAudit(ctx, token, *auditPath)
		if err != nil {
			return err
		}
		if enabled {
			fmt.Printf("milner vault: file audit device enabled, writing to %s\n", *auditPath)
		} else {
			fmt.Printf("milner vault: a file audit device already writes to %s\n", *auditPath)
		}
		return nil
	default:
		return fmt.Errorf("unknown action %q (want status, unseal or audit)", action)
	}
}

// shareSource returns where key shares come from: a file, stdin, or the
// terminal (asked one at a time, without echo).
func shareSource(path string) (func(vault.SealStatus) (string, error), func(), error) {
	switch path {
	case "-":
		return vault.Shares(os.Stdin), func() {}, nil
	case "":
		fd := int(os.Stdin.Fd())
		if !term.IsTerminal(fd) {
			return nil, nil, errors.New("stdin is not a terminal: give --shares-file <file> or --shares-file -")
		}
		return func(s vault.SealStatus) (string, error) {
			fmt.Fprintf(os.Stderr, "key share %d of %d (empty to stop): ", s.Progress+1, s.T)
			b, err := term.ReadPassword(fd)
			fmt.Fprintln(os.Stderr)
			if err != nil {
				return "", err
			}
			if share := strings.TrimSpace(string(b)); share != "" {
				return share, nil
			}
			return "", io.EOF
		}, func() {}, nil
	default:
		f, err := os.Open(path)
		if err != nil {
			return nil, nil, err
		}
		return vault.Shares(f), func() { _ = f.Close() }, nil // read-only: nothing to flush
	}
}

// readSecret reads one secret value from a file, stdin ("-"), or the
// terminal without echo.
func readSecret(path, prompt string) (string, error) {
	var b []byte
	var err error
	switch path {
	case "-":
		b, err = io.ReadAll(io.LimitReader(os.Stdin, 1<<16))
	case "":
		fd := int(os.Stdin.Fd())
		if !term.IsTerminal(fd) {
			return "", errors.New("stdin is not a terminal: give --token-file <file> or --token-file -")
		}
		fmt.Fprint(os.Stderr, prompt)
		b, err = term.ReadPassword(fd)
		fmt.Fprintln(os.Stderr)
	default:
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return "", err
	}
	if s := strings.TrimSpace(string(b)); s != "" {
		return s, nil
	}
	return "", errors.New("empty token")
}
