package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/milner/milner/internal/vault"
)

// audited is vault audit's result (--json): the audit log file, and
// whether this run enabled the device (false: one already wrote there).
type audited struct {
	Path    string `json:"path"`
	Enabled bool   `json:"enabled"`
}

// vaultCmd is `milner vault status|unseal|audit --addr <https://...>
// --ca-file <ca.crt>`. Key shares and tokens are read from a file, stdin
// ("-") or the terminal without echo, used once, and never written anywhere.
func vaultCmd() *cobra.Command {
	var addr, caFile, shares, tokenFile, auditPath string
	var asJSON bool
	// withClient is a subcommand's RunE on a client of --addr with --ca-file.
	withClient := func(do func(cmd *cobra.Command, c *vault.Client) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, _ []string) error {
			c, err := vault.Dial(addr, caFile)
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
			if s.Sealed {
				err = fmt.Errorf("vault at %s is sealed; unseal it: milner vault unseal --addr %s --ca-file %s", addr, addr, caFile)
			}
			return emit(asJSON, s, func() { fmt.Println(s) }, err)
		}),
	}
	unseal := &cobra.Command{
		Use: "unseal", Short: "Unseal from key shares the operator supplies (never stored)",
		Example: `  kubectl -n vault port-forward pod/vault-1 8200 &
  milner vault unseal --addr https://127.0.0.1:8200 --ca-file ~/.config/milner/dev/vault-ca.crt                   # asks for each share without echo
  milner vault unseal --addr https://127.0.0.1:8200 --ca-file ~/.config/milner/dev/vault-ca.crt --shares-file -   # shares from a pipe, one per line`,
		RunE: withClient(func(cmd *cobra.Command, c *vault.Client) error {
			s, err := c.UnsealFrom(cmd.Context(), shares, "shares-file")
			if err != nil {
				return err
			}
			return emit(asJSON, s, func() { fmt.Println(s) }, nil)
		}),
	}
	unseal.Flags().StringVar(&shares, "shares-file", "", "a file of key shares, one per line, or - for stdin (default: ask on the terminal)")
	audit := &cobra.Command{
		Use: "audit", Short: "Enable the file audit device (idempotent)",
		Example: `  milner vault audit --addr https://127.0.0.1:8200 --ca-file ~/.config/milner/dev/vault-ca.crt                  # asks for the token without echo
  milner vault audit --addr https://127.0.0.1:8200 --ca-file ~/.config/milner/dev/vault-ca.crt --token-file -   # the token from a pipe`,
		RunE: withClient(func(cmd *cobra.Command, c *vault.Client) error {
			token, err := vault.ReadToken(tokenFile, "token-file")
			if err != nil {
				return err
			}
			enabled, err := c.EnableFileAudit(cmd.Context(), token, auditPath)
			if err != nil {
				return err
			}
			return emit(asJSON, audited{Path: auditPath, Enabled: enabled}, func() {
				if enabled {
					fmt.Printf("milner vault: file audit device enabled, writing to %s\n", auditPath)
				} else {
					fmt.Printf("milner vault: a file audit device already writes to %s\n", auditPath)
				}
			}, nil)
		}),
	}
	audit.Flags().StringVar(&tokenFile, "token-file", "", "a file holding a token allowed to enable audit devices, or - for stdin (default: ask on the terminal)")
	audit.Flags().StringVar(&auditPath, "path", vault.DefaultAuditPath, "the audit log file")
	addJSON(status, &asJSON)
	addJSON(unseal, &asJSON)
	addJSON(audit, &asJSON)
	cmd.AddCommand(status, unseal, audit)
	return cmd
}
