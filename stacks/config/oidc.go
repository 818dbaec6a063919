package config

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// OIDCConfig is milner:cluster.oidc: people authenticate to the Kubernetes
// API with ID tokens of the site's OpenID Connect provider; the Talos admin
// certificate stays as break-glass (docs/runbooks/oidc.md). The Talos layer
// renders it into the control planes' kube-apiserver flags, the apps layer
// into one ClusterRoleBinding per bound group.
type OIDCConfig struct {
	// IssuerURL is the provider's issuer (https only; the iss claim of its
	// tokens), e.g. https://sso.example.org/realms/site.
	IssuerURL string `json:"issuerUrl"`
	// ClientID is the OIDC client the tokens are issued to (their aud claim).
	ClientID string `json:"clientId"`
	// UsernameClaim is the claim naming the user, e.g. preferred_username.
	UsernameClaim string `json:"usernameClaim"`
	// GroupsClaim is the claim listing the user's groups, e.g. groups.
	GroupsClaim string `json:"groupsClaim"`
	// UsernamePrefix is put before every username (default DefaultOIDCPrefix).
	UsernamePrefix *string `json:"usernamePrefix,omitempty"`
	// GroupsPrefix is put before every group (default DefaultOIDCPrefix).
	GroupsPrefix *string `json:"groupsPrefix,omitempty"`
	// IssuerCA is the PEM CA the issuer's TLS certificate chains to, when it
	// is not a public one (optional; not secret).
	IssuerCA string `json:"issuerCa,omitempty"`
	// GroupBindings maps a provider group (without its prefix) to the
	// ClusterRole its members get, e.g. platform-admins: cluster-admin.
	GroupBindings map[string]string `json:"groupBindings,omitempty"`
}

// DefaultOIDCPrefix is the default username and groups prefix: `kubectl
// auth whoami` answers oidc:<user> with the groups oidc:<group>.
const DefaultOIDCPrefix = "oidc:"

// OIDCScopes are the scopes a client asks the provider for beyond openid:
// the standard scope of each standard claim the username or groups claim
// names (OpenID Connect Core 1.0 §5.4), and the groups scope Keycloak's
// and Dex's groups claim comes with. openid itself kubelogin always asks.
func (o *OIDCConfig) OIDCScopes() []string {
	byClaim := map[string]string{
		"email": "email", "email_verified": "email",
		"preferred_username": "profile", "name": "profile", "nickname": "profile",
		"groups": "groups",
	}
	var out []string
	for _, claim := range []string{o.UsernameClaim, o.GroupsClaim} {
		if s, ok := byClaim[claim]; ok && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// applyOIDCDefaults fills the prefixes.
func (o *OIDCConfig) applyOIDCDefaults() {
	if o.UsernamePrefix == nil {
		p := DefaultOIDCPrefix
		o.UsernamePrefix = &p
	}
	if o.GroupsPrefix == nil {
		p := DefaultOIDCPrefix
		o.GroupsPrefix = &p
	}
}

// systemPrefix is the prefix of the names Kubernetes reserves for itself
// (system:masters, system:nodes, system:serviceaccount:…, system:anonymous).
const systemPrefix = "system:"

// validateOIDC checks milner:cluster.oidc.
func (c *Config) validateOIDC(p *problems) {
	o := c.Cluster.OIDC
	if o == nil {
		return
	}
	path := Key("cluster") + ".oidc"
	// kube-apiserver takes an https issuer only (--oidc-issuer-url: "only
	// HTTPS scheme will be accepted"), without query or fragment (the iss
	// claim is compared with it as a string).
	if u, err := url.Parse(o.IssuerURL); err != nil || u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		p.addf(path+".issuerUrl", "%q is not an https:// URL without user, query or fragment", o.IssuerURL)
	}
	if o.ClientID == "" {
		p.addf(path+".clientId", "is required")
	}
	if o.UsernameClaim == "" {
		p.addf(path+".usernameClaim", "is required (e.g. preferred_username, email or sub)")
	}
	if o.GroupsClaim == "" {
		p.addf(path+".groupsClaim", "is required (e.g. groups): the group bindings match on it")
	}
	// A prefix lets a token name a system: user or group when the prefix
	// itself is a start of "system:" (the empty prefix, "sys", …: the claim
	// supplies the rest, e.g. groups ["system:masters"], which RBAC grants
	// everything), or when every name it makes starts with "system:".
	// kube-apiserver's "-" username prefix means no prefix at all
	// (pkg/kubeapiserver/options/authentication.go, "Special value
	// indicating usernames shouldn't be prefixed").
	for _, f := range []struct {
		field, what string
		v           *string
	}{{"usernamePrefix", "users", o.UsernamePrefix}, {"groupsPrefix", "groups", o.GroupsPrefix}} {
		v := *f.v
		switch {
		case v == "" || v == "-":
			p.addf(path+"."+f.field, "%q leaves %s unprefixed: a token could name system: %s (e.g. system:masters); use e.g. %q", v, f.what, f.what, DefaultOIDCPrefix)
		case strings.HasPrefix(systemPrefix, v) || strings.HasPrefix(v, systemPrefix):
			p.addf(path+"."+f.field, "%q lets a token name system: %s (Kubernetes' reserved names); use e.g. %q", v, f.what, DefaultOIDCPrefix)
		}
	}
	if o.IssuerCA != "" {
		if err := checkCAPEM(o.IssuerCA); err != nil {
			p.addf(path+".issuerCa", "%v", err)
		}
	}
	for _, g := range sortedKeys(o.GroupBindings) {
		gp := fmt.Sprintf("%s.groupBindings[%s]", path, g)
		// The binding is named after the group (OIDCBindingName), and a
		// ClusterRoleBinding's name is a path segment (no "/" or "%").
		if g == "" || strings.ContainsAny(g, "/%") || g == "." || g == ".." {
			p.addf(gp, "group %q cannot name a ClusterRoleBinding (no /, %%, . or ..; with Keycloak, turn off the groups mapper's full group path)", g)
		}
		if r := o.GroupBindings[g]; r == "" || strings.ContainsAny(r, "/%") || r == "." || r == ".." {
			p.addf(gp, "%q is not a ClusterRole name", r)
		}
	}
}

// checkCAPEM reports PEM text that holds no CA certificate or anything else.
func checkCAPEM(s string) error {
	rest := []byte(s)
	n := 0
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return fmt.Errorf("holds a %s block; want CA certificates only", b.Type)
		}
		cert, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return fmt.Errorf("certificate %d: %w", n+1, err)
		}
		if !cert.IsCA {
			return fmt.Errorf("certificate %d (%s) is not a CA", n+1, cert.Subject)
		}
		n++
	}
	if n == 0 || strings.TrimSpace(string(rest)) != "" {
		return fmt.Errorf("is not PEM CA certificates")
	}
	return nil
}

// OIDCBindingName is the ClusterRoleBinding of a bound group: a state
// contract (renaming it deletes and creates the binding).
func OIDCBindingName(group string) string { return "milner-oidc-" + group }
