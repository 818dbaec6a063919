// Package secretsbundle turns a cluster's Talos secrets bundle, as the
// Pulumi state of its talos:machine/secrets:Secrets resource holds it, into
// the file the Talos provider imports (the `talosctl gen secrets` format,
// Talos machinery's secrets.Bundle in YAML), and keeps that file encrypted
// with age at rest. It is what `milner secrets export|import` are made of.
//
// The import side is grounded in terraform-provider-talos'
// talos_machine_secrets ImportState (pkg/talos/talos_machine_secrets_resource.go):
// the import id is the path of such a YAML file, decoded with yaml.v3 into
// secrets.Bundle; the talosVersion it records is v1.3 (v1.2 when the bundle
// has an AES-CBC secret), which the program's ignoreChanges on talosVersion
// keeps from planning a change.
package secretsbundle

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"filippo.io/age"
	"filippo.io/age/armor"
	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"go.yaml.in/yaml/v3"
)

// FromState builds the bundle from the machineSecrets output of the
// secrets resource (keys as the Pulumi schema names them; certificates and
// keys base64-encoded PEM, as the provider stores them).
func FromState(machineSecrets map[string]any) (*secrets.Bundle, error) {
	r := reader{m: machineSecrets}
	b := &secrets.Bundle{
		Cluster: &secrets.Cluster{ID: r.str("cluster", "id"), Secret: r.str("cluster", "secret")},
		Secrets: &secrets.Secrets{
			BootstrapToken:            r.str("secrets", "bootstrapToken"),
			SecretboxEncryptionSecret: r.opt("secrets", "secretboxEncryptionSecret"),
			AESCBCEncryptionSecret:    r.opt("secrets", "aescbcEncryptionSecret"),
		},
		TrustdInfo: &secrets.TrustdInfo{Token: r.str("trustdinfo", "token")},
		Certs: &secrets.Certs{
			Etcd:              r.pair("etcd"),
			K8s:               r.pair("k8s"),
			K8sAggregator:     r.pair("k8sAggregator"),
			K8sServiceAccount: &x509.PEMEncodedKey{Key: r.bytes("certs", "k8sServiceaccount", "key")},
			OS:                r.pair("os"),
		},
	}
	if len(r.missing) > 0 {
		return nil, fmt.Errorf("machine secrets: missing or malformed %s", strings.Join(r.missing, ", "))
	}
	return b, nil
}

// reader walks the nested state object and records what it could not read.
type reader struct {
	m       map[string]any
	missing []string
}

func (r *reader) get(path ...string) (string, bool) {
	var v any = r.m
	for _, k := range path {
		obj, ok := v.(map[string]any)
		if !ok {
			return "", false
		}
		v = obj[k]
	}
	s, ok := v.(string)
	return s, ok && s != ""
}

func (r *reader) str(path ...string) string {
	s, ok := r.get(path...)
	if !ok {
		r.missing = append(r.missing, strings.Join(path, "."))
	}
	return s
}

func (r *reader) opt(path ...string) string {
	s, _ := r.get(path...)
	return s
}

func (r *reader) bytes(path ...string) []byte {
	s := r.str(path...)
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		r.missing = append(r.missing, strings.Join(path, ".")+" (not base64)")
	}
	return b
}

func (r *reader) pair(name string) *x509.PEMEncodedCertificateAndKey {
	return &x509.PEMEncodedCertificateAndKey{Crt: r.bytes("certs", name, "cert"), Key: r.bytes("certs", name, "key")}
}

// Marshal writes the bundle in the YAML the provider's import reads.
func Marshal(b *secrets.Bundle) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(b); err != nil {
		return nil, fmt.Errorf("secrets bundle: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("secrets bundle: %w", err)
	}
	return buf.Bytes(), nil
}

// Parse reads a bundle as the provider's import does (yaml.v3 into
// secrets.Bundle) and refuses one that lacks a CA or the cluster identity:
// importing it would plan new certificates for a running cluster.
func Parse(plain []byte) (*secrets.Bundle, error) {
	var b *secrets.Bundle
	if err := yaml.Unmarshal(plain, &b); err != nil {
		return nil, fmt.Errorf("secrets bundle: %w", err)
	}
	switch {
	case b == nil || b.Cluster == nil || b.Cluster.ID == "" || b.Cluster.Secret == "":
		return nil, errors.New("secrets bundle: no cluster id or secret")
	case b.Certs == nil || b.Certs.OS == nil || b.Certs.K8s == nil || b.Certs.Etcd == nil || len(b.Certs.OS.Key) == 0 || len(b.Certs.K8s.Key) == 0 || len(b.Certs.Etcd.Key) == 0:
		return nil, errors.New("secrets bundle: a CA (os, k8s or etcd) is missing")
	case b.Secrets == nil || b.TrustdInfo == nil:
		return nil, errors.New("secrets bundle: no Kubernetes or trustd secrets")
	}
	return b, nil
}

// Recipients parses the age recipients an operator names: each key
// (age1..., as age-keygen prints it) and every recipient of each file (one
// per line, # comments and blank lines skipped: age's own recipients-file
// format, age.ParseRecipients). At least one is required.
func Recipients(keys, files []string) ([]age.Recipient, error) {
	var rs []age.Recipient
	for _, s := range keys {
		r, err := age.ParseX25519Recipient(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("recipient %q: %w", s, err)
		}
		rs = append(rs, r)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("recipients file: %w", err)
		}
		frs, err := age.ParseRecipients(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("recipients file %s: %w", f, err)
		}
		rs = append(rs, frs...)
	}
	if len(rs) == 0 {
		return nil, errors.New("at least one age recipient (age1...) is required")
	}
	return rs, nil
}

// Encrypt encrypts plain for every age recipient (age1... public keys, as
// age-keygen prints them), armored so the file survives copy and paste.
func Encrypt(plain []byte, recipients []string) ([]byte, error) {
	rs, err := Recipients(recipients, nil)
	if err != nil {
		return nil, fmt.Errorf("encrypt: %w", err)
	}
	var buf bytes.Buffer
	armored := armor.NewWriter(&buf) // age's ASCII armor, as `age -a` writes
	w, err := age.Encrypt(armored, rs...)
	if err == nil {
		_, err = w.Write(plain)
	}
	if err == nil {
		err = w.Close() // the last chunk and its tag
	}
	if err == nil {
		err = armored.Close() // the armor's footer
	}
	if err != nil {
		return nil, fmt.Errorf("encrypt: %w", err)
	}
	return buf.Bytes(), nil
}

// Decrypt decrypts an (armored or binary) age file with the identities of
// an age key file (AGE-SECRET-KEY-1... lines, as age-keygen writes them).
func Decrypt(ciphertext []byte, identityFile io.Reader) ([]byte, error) {
	r, err := DecryptReader(bytes.NewReader(ciphertext), identityFile)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}

// DecryptReader is Decrypt as a stream: each chunk is authenticated as it
// is read, so a read error means the file was damaged or cut short.
func DecryptReader(sealed io.Reader, identityFile io.Reader) (io.Reader, error) {
	ids, err := age.ParseIdentities(identityFile)
	if err != nil {
		return nil, fmt.Errorf("decrypt: identity file: %w", err)
	}
	r, err := age.Decrypt(armorReader(sealed), ids...)
	if err != nil {
		return nil, fmt.Errorf("decrypt: %w", err)
	}
	return r, nil
}

// armorReader reads armored or binary age files alike, as the age CLI does.
func armorReader(r io.Reader) io.Reader {
	br := bufio.NewReader(r)
	if head, _ := br.Peek(len(armor.Header)); string(head) == armor.Header {
		return armor.NewReader(br)
	}
	return br
}
