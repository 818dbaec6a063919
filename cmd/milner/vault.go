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
	// withClient is a subcommand's RunE on a client of --addr with --ca-file.
	withClient := func(do func(cmd *cobra.Command, c *vault.Client) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, _ []string) error {
			ca, err := os.ReadFile(caFile)
			if err != nil {
				return err
			}
			c, err := vault.NewClient(addr, ca)
			if err != nil {
				return err
			}
			return do(cmd, c)
		}
	}
	cmd := &cobra.Command{
		Use:   "vault",
		Short: "Vault's seal status, unseal from key shares you supply, enable the audit device",
		Long: `vault talks to the cluster's Vault over its TLS listener (through a
port-forward) with the CA that issued its certificate. Key shares and
tokens are read from a file, stdin ("-") or the terminal without echo,
used once and never written anywhere.`,
		Example: `  kubectl -n vault port-forward vault-0 8200 &
  milner vault status --addr https://127.0.0.1:8200 --ca-file ~/.config/milner/dev/vault-ca.crt
  milner vault unseal --addr https://127.0.0.1:8200 --ca-file ~/.config/milner/dev/vault-ca.crt   # asks for the shares
  milner vault audit  --addr https://127.0.0.1:8200 --ca-file ~/.config/milner/dev/vault-ca.crt --token-file -`,
	}
	cmd.PersistentFlags().StringVar(&addr, "addr", "", "Vault's https:// address, e.g. https://127.0.0.1:8200 through 'kubectl -n vault port-forward vault-0 8200' (required)")
	cmd.PersistentFlags().StringVar(&caFile, "ca-file", "", "the CA certificate that issued Vault's certificate (the value of milner:vaultTlsCa) (required)")
	_ = cmd.MarkPersistentFlagRequired("addr")
	_ = cmd.MarkPersistentFlagRequired("ca-file")
	status := &cobra.Command{
		Use: "status", Short: "Print the seal status (exit 1 when sealed)",
		Example: `  kubectl -n vault port-forward pod/vault-1 8200 &
  milner vault status --addr https://127.0.0.1:8200 --ca-file ~/.config/milner/dev/vault-ca.crt`,
		RunE: withClient(func(cmd *cobra.Command, c *vault.Client) error {
			s, err := c.SealStatus(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Println(s)
			if s.Sealed {
				return fmt.Errorf("vault at %s is sealed; unseal it: milner vault unseal --addr %s --ca-file %s", addr, addr, caFile)
			}
			return nil
		}),
	}
	unseal := &cobra.Command{
		Use: "unseal", Short: "Unseal from key shares the operator supplies (never stored)",
		Example: `  kubectl -n vault port-forward pod/vault-1 8200 &
  milner vault unseal --addr https://127.0.0.1:8200 --ca-file ~/.config/milner/dev/vault-ca.crt                   # asks for each share without echo
  milner vault unseal --addr https://127.0.0.1:8200 --ca-file ~/.config/milner/dev/vault-ca.crt --shares-file -   # shares from a pipe, one per line`,
		RunE: withClient(func(cmd *cobra.Command, c *vault.Client) error {
			next, closeFn, err := secretSource(shares, "shares-file")
			if err != nil {
				return err
			}
			defer closeFn()
			s, err := c.UnsealWith(cmd.Context(), func(s vault.SealStatus) (string, error) {
				return next(fmt.Sprintf("key share %d of %d (empty to stop): ", s.Progress+1, s.T))
			})
			if err != nil {
				return err
			}
			fmt.Println(s)
			return nil
		}),
	}
	unseal.Flags().StringVar(&shares, "shares-file", "", "a file of key shares, one per line, or - for stdin (default: ask on the terminal)")
	audit := &cobra.Command{
		Use: "audit", Short: "Enable the file audit device (idempotent)",
		Example: `  milner vault audit --addr https://127.0.0.1:8200 --ca-file ~/.config/milner/dev/vault-ca.crt                  # asks for the token without echo
  milner vault audit --addr https://127.0.0.1:8200 --ca-file ~/.config/milner/dev/vault-ca.crt --token-file -   # the token from a pipe`,
		RunE: withClient(func(cmd *cobra.Command, c *vault.Client) error {
			next, closeFn, err := secretSource(tokenFile, "token-file")
			if err != nil {
				return err
			}
			defer closeFn()
			token, err := next("Vault token: ")
			if errors.Is(err, io.EOF) {
				return errors.New("empty token")
			}
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
		}),
	}
	audit.Flags().StringVar(&tokenFile, "token-file", "", "a file holding a token allowed to enable audit devices, or - for stdin (default: ask on the terminal)")
	audit.Flags().StringVar(&auditPath, "path", DefaultAuditPath, "the audit log file")
	cmd.AddCommand(status, unseal, audit)
	return cmd
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

// linesOf reads the non-blank lines of r (vault.Shares).
func linesOf(r io.Reader) func(string) (string, error) {
	shares := vault.Shares(r)
	return func(string) (string, error) { return shares(vault.SealStatus{}) }
}
