package config

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/url"
	"regexp"
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
	UsernamePrefix *string `json:"usernamePrefix,omitempty" default:"oidc:"`
	// GroupsPrefix is put before every group (default DefaultOIDCPrefix).
	GroupsPrefix *string `json:"groupsPrefix,omitempty" default:"oidc:"`
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
	c.checkOIDCNames(p, path)
}

// oidcGroup is a group a binding may name: what the binding's name
// (OIDCBindingName) carries as a Kubernetes object name and a Pulumi
// logical name, and what RBAC matches literally (no wildcard: RBAC has
// none for subjects). Keycloak's and Dex's group names fit it; a full
// group path (/platform/admins) does not.
var oidcGroup = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._@-]{0,200}[A-Za-z0-9])?$`)

// oidcToken is a client id or a claim name as the API server's flags and
// kubelogin's arguments carry them: printable, no blank, quote or comma.
var oidcToken = regexp.MustCompile(`^[A-Za-z0-9._:/@+=-]+$`)

// checkOIDCNames refuses OIDC names that only the apply would refuse
// (issue #49, class 7): a group that cannot be part of its binding's
// name, a wildcard group, a ClusterRole name that is none, a client id or
// claim with a blank (the kube-apiserver flag and kubelogin's argument
// end at it).
func (c *Config) checkOIDCNames(p *problems, path string) {
	o := c.Cluster.OIDC
	for _, f := range []struct{ field, v string }{{"clientId", o.ClientID}, {"usernameClaim", o.UsernameClaim}, {"groupsClaim", o.GroupsClaim}} {
		if f.v != "" && !oidcToken.MatchString(f.v) {
			p.addf(path+"."+f.field, "%q has a character the API server's --oidc flag or kubelogin's argument does not carry (a blank, a quote, a comma, a control character)", f.v)
		}
	}
	for _, g := range sortedKeys(o.GroupBindings) {
		gp := fmt.Sprintf("%s.groupBindings[%s]", path, g)
		switch {
		case strings.Contains(g, "*"):
			p.addf(gp, "group %q is a wildcard, which RBAC does not have: the binding would name a group called %q; bind each group by its name", g, g)
		case !oidcGroup.MatchString(g):
			p.addf(gp, "group %q cannot be part of its ClusterRoleBinding's name %s (letters, digits, '.', '_', '@', '-'; with Keycloak, turn off the groups mapper's full group path)", g, OIDCBindingName(g))
		}
		if r := o.GroupBindings[g]; !clusterRoleName.MatchString(r) {
			p.addf(gp, "%q is not a ClusterRole name", r)
		}
	}
}

// clusterRoleName is a ClusterRole's name: a path segment name (RBAC's
// ValidateRBACName, k8s.io/apimachinery path.IsValidPathSegmentName) of
// the characters role names use (system:aggregate-to-admin, cluster-admin).
var clusterRoleName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.:_-]*$`)

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
