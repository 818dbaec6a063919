package config

// Plain credentials anywhere in the stack file (issue #49, class 5): the
// stack file is committed, so a credential in it is readable by everyone
// who reads the repository, whichever key holds it. Every value stored in
// plain text, in any namespace and under any key (Milner's, a key nobody
// reads, another namespace's), is read for a credential by its shape: a
// PEM private key, a published token format (redact.TokenShaped), a
// Proxmox VE API token (user@realm!tokenid=secret), a URL carrying a
// password or a token as its user. Values stored with `pulumi config set
// --secret` are ciphertext in the file and are not read here.

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/milner/milner/internal/redact"
)

// privateKey is a credential by its shape: a PEM private key.
var privateKey = regexp.MustCompile(`-----BEGIN ([A-Z0-9]+ )*PRIVATE KEY-----`)

// proxmoxTokenShape is a Proxmox VE API token anywhere in a value
// (PVEAPIToken=user@realm!tokenid=secret, as PVE's API documentation
// writes it; the secret is a UUID).
var proxmoxTokenShape = regexp.MustCompile(`[^\s@"'=]+@[^\s!"']+![^\s="']+=[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-`)

// urlInText finds the URLs of a value.
var urlInText = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>]+`)

// checkPlainCredentials reads every plain value of the stack (every key
// src lists; the keys the program reads when it lists none) for a
// credential: a secret key of Milner's (SecretKeys, and the keys apps map
// with secretValues) stored without --secret, and anything else holding a
// credential by its shape, each reported at its path. An empty value is
// no credential (Pulumi.yaml declares the secret keys with an empty
// default, which the engine passes to the program as plain text).
func checkPlainCredentials(src ConfigSource, apps []AppConfig, p *problems) {
	secretKeys := secretKeysOf(apps)
	for _, full := range sourceKeys(src, apps) {
		raw, _ := src.GetConfig(full)
		if src.IsConfigSecret(full) || raw == "" {
			continue
		}
		if name, ours := strings.CutPrefix(full, Namespace+":"); ours && slices.Contains(secretKeys, name) {
			p.addf(full, "is stored in plain text; run `pulumi config set --secret %s <value>`", full)
			continue
		}
		var v any
		if t := strings.TrimSpace(raw); (strings.HasPrefix(t, "{") || strings.HasPrefix(t, "[")) && json.Unmarshal([]byte(raw), &v) == nil {
			walkPlain(v, full, "a credential has no place in a plain value: Milner reads credentials only from secret keys (docs/runbooks/secrets.md); remove it", p)
			continue
		}
		checkCredentialShape(p, full, raw, fmt.Sprintf("store it with `pulumi config set --secret %s` (or keep it out of the stack)", full))
	}
}

// secretKeysOf are Milner's secret keys: SecretKeys and those apps map.
func secretKeysOf(apps []AppConfig) []string {
	out := slices.Clone(SecretKeys)
	for _, a := range apps {
		for _, k := range a.SecretValues {
			out = append(out, k)
		}
	}
	return out
}

// walkPlain checks every string of a decoded value, keys included, at its
// path: an identifier key as .key, any other (a URL, a dotted name) as [key].
func walkPlain(v any, at, fix string, p *problems) {
	switch t := v.(type) {
	case map[string]any:
		for _, k := range sortedKeys(t) {
			kp := at + "[" + k + "]"
			if identKey.MatchString(k) {
				kp = at + "." + k
			}
			kfix := fix
			if strings.HasSuffix(kp, ".values") {
				// A chart's values: the app maps its secrets with secretValues.
				kfix = "put it in a secret key and map it with secretValues"
			}
			checkCredentialShape(p, kp, k, kfix)
			walkPlain(t[k], kp, kfix, p)
		}
	case []any:
		for i, e := range t {
			walkPlain(e, fmt.Sprintf("%s[%d]", at, i), fix, p)
		}
	case string:
		checkCredentialShape(p, at, t, fix)
	}
}

// identKey is a key written as .key in a config path.
var identKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

// checkCredentialShape reports s at path when it holds a credential by
// its shape: a URL's first (its message names the URL, masked), else a
// key or a token.
func checkCredentialShape(p *problems, at, s, fix string) {
	found := false
	for _, raw := range urlInText.FindAllString(s, -1) {
		u, err := url.Parse(raw)
		if err != nil || u.User == nil {
			continue
		}
		if _, hasPassword := u.User.Password(); hasPassword {
			p.addf(at, "carries a password in plain text (%s); give the credential through the tool's own secret (a secret key, a credentials helper), never in the URL", redact.URL(raw))
			found = true
		} else if redact.UserIsCredential(u) {
			p.addf(at, "carries a credential as its user name (%s); give it through the tool's own secret, never in the URL", redact.URL(raw))
			found = true
		}
	}
	switch {
	case found:
	case privateKey.MatchString(s):
		p.addf(at, "holds a private key in plain text (the stack file is committed; the Helm release record for a chart value); %s", fix)
	case proxmoxTokenShape.MatchString(s):
		p.addf(at, "holds a Proxmox VE API token in plain text; %s", fix)
	case redact.TokenShaped(s):
		p.addf(at, "holds a token in plain text (its shape is a published token format); %s", fix)
	}
}
