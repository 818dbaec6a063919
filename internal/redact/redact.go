// Package redact masks credentials where they stand: the password, or a
// user name that is a token, in a URL's user information; the values of a
// URL's credential query parameters; a connection string's password=; a
// token recognised by its shape. Everything else in the text, a stack name
// equal to a password included, is left as it was written.
//
// Milner prints nothing unredacted: its stdout and stderr pass through
// Text (Stdio, which milner's main installs), and the URLs it names in messages are
// URL's.
package redact

import (
	"io"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Mask is what a credential is printed as (net/url's URL.Redacted).
const Mask = "xxxxx"

// credentialParams are query parameter names, matched as lower-case
// substrings, whose values are credentials: lib/pq's password and
// sslpassword, object stores' keys, secrets, tokens and signatures.
var credentialParams = []string{"password", "passwd", "secret", "token", "key", "sig", "credential"}

// CredentialParam reports whether a URL query parameter holds a
// credential. A parameter naming a file holds its path (libvirt's keyfile,
// lib/pq's sslkey and sslrootcert), not the key.
func CredentialParam(name string) bool {
	name = strings.ToLower(name)
	if strings.Contains(name, "file") || strings.Contains(name, "path") || name == "sslkey" {
		return false
	}
	return slices.ContainsFunc(credentialParams, func(c string) bool { return strings.Contains(name, c) })
}

// tokenShapes are credentials by their shape wherever they appear: GitHub,
// GitLab, Vault, Slack and AWS access tokens and JWTs, as their issuers
// document their prefixes.
var tokenShapes = regexp.MustCompile(`(^|[^A-Za-z0-9_])(gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_-]{20,}|hv[sb]\.[A-Za-z0-9_-]{20,}|xox[abpr]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*)`)

// TokenShaped reports whether s holds a token recognised by its shape.
func TokenShaped(s string) bool { return tokenShapes.MatchString(s) }

// UserIsCredential reports whether the user name of a URL is a credential:
// a token by its shape, or, on http(s), a user name given without a
// password (git, Helm and forges send it as the basic-auth secret, as in
// https://<token>@host/). A database's or an ssh URL's user is a role.
func UserIsCredential(u *url.URL) bool {
	if u.User == nil {
		return false
	}
	_, hasPassword := u.User.Password()
	return userIsCredential(u.Scheme, u.User.Username(), hasPassword)
}

func userIsCredential(scheme, name string, hasPassword bool) bool {
	scheme = strings.ToLower(scheme)
	return name != "" && (TokenShaped(name) || !hasPassword && (scheme == "http" || scheme == "https"))
}

// URL returns raw with its credentials masked in place: the rest of it is
// kept as written (not re-encoded), so that it reads as the URL it was.
func URL(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		authority = maskUserinfo(scheme, authority[:at]) + authority[at:]
	}
	return scheme + "://" + authority + maskQuery(tail)
}

// maskUserinfo masks the password of a URL's user information, and the
// user name when it is the credential.
func maskUserinfo(scheme, info string) string {
	user, _, hasPassword := strings.Cut(info, ":")
	name, err := url.PathUnescape(user)
	if err != nil || userIsCredential(scheme, name, hasPassword) {
		user = Mask // a user name no client could send is masked too
	}
	if hasPassword {
		return user + ":" + Mask
	}
	return user
}

// maskQuery masks the values of credential parameters in the query of a
// URL's path-and-after (tail), leaving every other byte as it was.
func maskQuery(tail string) string {
	q := strings.IndexByte(tail, '?')
	if q < 0 {
		return tail
	}
	query, fragment := tail[q+1:], ""
	if h := strings.IndexByte(query, '#'); h >= 0 {
		query, fragment = query[:h], query[h:]
	}
	params := strings.Split(query, "&")
	for i, p := range params {
		k, _, hasValue := strings.Cut(p, "=")
		if name, err := url.QueryUnescape(k); hasValue && (err != nil || CredentialParam(name)) {
			params[i] = k + "=" + Mask
		}
	}
	return tail[:q+1] + strings.Join(params, "&") + fragment
}

// urls matches a URL in text: a scheme, "://", and what follows up to a
// space, a quote or a bracket that ends it in messages.
var urls = regexp.MustCompile("[A-Za-z][A-Za-z0-9+.-]*://[^\\s\"'`<>()\\[\\]{}]+")

// dsnPassword matches the password of a key=value connection string
// (lib/pq: password=..., quoted or not).
var dsnPassword = regexp.MustCompile(`(?i)\b((?:ssl)?password=)('(?:[^'\\]|\\.)*'|[^\s&'"]+)`)

// Text returns s with every credential masked where it stands: in each URL
// (URL), each connection string's password, and each token recognised by
// its shape.
func Text(s string) string {
	if strings.Contains(s, "://") {
		s = urls.ReplaceAllStringFunc(s, URL)
	}
	s = dsnPassword.ReplaceAllString(s, "${1}"+Mask)
	return tokenShapes.ReplaceAllString(s, "${1}"+Mask)
}

// Writer is w with the text of every Write masked (Text). A credential
// split across two writes is not seen: give it whole lines.
func Writer(w io.Writer) io.Writer { return writer{w} }

type writer struct{ w io.Writer }

func (w writer) Write(p []byte) (int, error) {
	if _, err := io.WriteString(w.w, Text(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
