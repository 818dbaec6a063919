package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/milner/milner/internal/vault"
)

// DefaultAuditPath is the audit log file on the chart's audit PVC
// (server.auditStorage mounts it at /vault/audit).
const DefaultAuditPath = "/vault/audit/vault_audit.log"

// vaultCmd is `milner vault status|unseal|audit --addr <https://...>
// --ca-file <ca.crt>`. Key shares and tokens are read from a file, stdin
// ("-") or the terminal without echo, used once, and never written anywhere.
func vaultCmd() *cobra.Command {
	var addr, caFile, shares, tokenFile, auditPath string
	client := func() (*vault.Client, error) {
		ca, err := os.ReadFile(caFile)
		if err != nil {
			return nil, err
		}
		return vault.NewClient(addr, ca)
	}
	cmd := &cobra.Command{
		Use:   "vault",
		Short: "Vault's seal status, unseal from key shares you supply, enable the audit device",
		Long: `vault talks to the cluster's Vault over its TLS listener (through a
port-forward) with the CA that issued its certificate. Key shares and
tokens are read from a file, stdin ("-") or the terminal without echo,
used once and never written anywhere.`,
		Example: `  kubectl -n vault port-forward vault-0 8200 &
  milner vault status --addr https://127.0.0.1:8200 --ca-file ca.crt
  milner vault unseal --addr https://127.0.0.1:8200 --ca-file ca.crt   # asks for the shares
  milner vault audit  --addr https://127.0.0.1:8200 --ca-file ca.crt --token-file -`,
	}
	cmd.PersistentFlags().StringVar(&addr, "addr", "", "Vault's https:// address, e.g. https://127.0.0.1:8200 through 'kubectl -n vault port-forward vault-0 8200' (required)")
	cmd.PersistentFlags().StringVar(&caFile, "ca-file", "", "the CA certificate that issued Vault's certificate (the value of milner:vaultTlsCa) (required)")
	_ = cmd.MarkPersistentFlagRequired("addr")
	_ = cmd.MarkPersistentFlagRequired("ca-file")
	status := &cobra.Command{
		Use: "status", Short: "Print the seal status (exit 1 when sealed)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			s, err := c.SealStatus(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Println(s)
			if s.Sealed {
				return fmt.Errorf("vault at %s is sealed; unseal it: milner vault unseal --addr %s --ca-file %s", addr, addr, caFile)
			}
			return nil
		},
	}
	unseal := &cobra.Command{
		Use: "unseal", Short: "Unseal from key shares the operator supplies (never stored)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			next, closeFn, err := shareSource(shares)
			if err != nil {
				return err
			}
			defer closeFn()
			s, err := c.UnsealWith(cmd.Context(), next)
			if err != nil {
				return err
			}
			fmt.Println(s)
			return nil
		},
	}
	unseal.Flags().StringVar(&shares, "shares-file", "", "a file of key shares, one per line, or - for stdin (default: ask on the terminal)")
	audit := &cobra.Command{
		Use: "audit", Short: "Enable the file audit device (idempotent)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			token, err := readSecret(tokenFile, "Vault token: ")
			if err != nil {
				return err
			}
			enabled, err := c.EnableFileAudit(cmd.Context(), token, auditPath)
			if err != nil {
				return err
			}
			if enabled {
				fmt.Printf("milner vault: file audit device enabled, writing to %s\n", auditPath)
			} else {
				fmt.Printf("milner vault: a file audit device already writes to %s\n", auditPath)
			}
			return nil
		},
	}
	audit.Flags().StringVar(&tokenFile, "token-file", "", "a file holding a token allowed to enable audit devices, or - for stdin (default: ask on the terminal)")
	audit.Flags().StringVar(&auditPath, "path", DefaultAuditPath, "the audit log file")
	cmd.AddCommand(status, unseal, audit)
	return cmd
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
