// Package redact masks credentials where they stand: the password, or a
// user name that is a token, in a URL's user information; the values of a
// URL's credential query parameters; a connection string's password=; a
// token recognised by its shape; and a credential milner knows by its
// value (Literal: the backend URL's password), wherever it stands as a
// word of its own, as written or escaped. Everything else in the text is
// left as it was written.
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
	"sync"
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

// Text returns s with every credential masked where it stands: each
// credential known by its value (Literal), in each URL (URL), each
// connection string's password, and each token recognised by its shape.
func Text(s string) string {
	s = maskLiterals(s)
	if strings.Contains(s, "://") {
		s = urls.ReplaceAllStringFunc(s, URL)
	}
	s = dsnPassword.ReplaceAllString(s, "${1}"+Mask)
	return tokenShapes.ReplaceAllString(s, "${1}"+Mask)
}

// literals are the credentials known by their value, each in every
// spelling it may be printed in.
var literals struct {
	sync.RWMutex
	list []string
}

// Literal makes Text mask secret wherever it stands as a word of its own
// (not inside a longer run of letters, digits and '_'): as given, percent-
// unescaped, and escaped as a URL's user information or query writes it.
// A URL's shape cannot be told from a message once its password holds
// characters a message ends a URL at ('(', ')', a quote, a blank) or that
// the URL itself should have escaped ('/', '@'), so the one credential
// milner holds by value, the backend URL's password, is masked by value.
func Literal(secret string) {
	if secret == "" {
		return
	}
	forms := []string{secret, url.QueryEscape(secret), url.PathEscape(secret), strings.TrimPrefix(url.UserPassword("", secret).String(), ":")}
	if plain, err := url.PathUnescape(secret); err == nil {
		forms = append(forms, plain, url.QueryEscape(plain), url.PathEscape(plain), strings.TrimPrefix(url.UserPassword("", plain).String(), ":"))
	}
	literals.Lock()
	defer literals.Unlock()
	for _, f := range forms {
		if f != "" && !slices.Contains(literals.list, f) {
			literals.list = append(literals.list, f)
		}
	}
	// Longest first: a spelling that holds another is masked whole.
	slices.SortFunc(literals.list, func(a, b string) int { return len(b) - len(a) })
}

// URLCredentials registers, as Literal, the credentials of a URL as it was
// written, whether or not it parses: every candidate password of its user
// information (from the first ':' to each '@' after it: a password may
// hold '@', '/' or '?' unescaped) and the values of its credential query
// parameters.
func URLCredentials(raw string) {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return
	}
	if colon := strings.IndexByte(rest, ':'); colon >= 0 {
		for i := colon + 1; i < len(rest); i++ {
			if rest[i] == '@' {
				Literal(rest[colon+1 : i])
			}
		}
	}
	if _, query, ok := strings.Cut(rest, "?"); ok {
		for _, p := range strings.Split(query, "&") {
			if k, v, ok := strings.Cut(p, "="); ok && CredentialParam(k) {
				Literal(v)
			}
		}
	}
}

// maskLiterals masks every registered literal where it stands as a word
// of its own.
func maskLiterals(s string) string {
	literals.RLock()
	defer literals.RUnlock()
	for _, lit := range literals.list {
		s = maskWord(s, lit)
	}
	return s
}

// maskWord replaces each occurrence of lit in s that does not continue a
// word: the byte before a lit that starts with a word character, and the
// byte after a lit that ends with one, must not be word characters.
func maskWord(s, lit string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, lit)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		end := i + len(lit)
		joined := i > 0 && wordByte(lit[0]) && wordByte(s[i-1]) || end < len(s) && wordByte(lit[len(lit)-1]) && wordByte(s[end])
		b.WriteString(s[:i])
		if joined {
			b.WriteString(lit)
		} else {
			b.WriteString(Mask)
		}
		s = s[end:]
	}
}

// wordByte reports a letter, digit or '_' (or a byte of a multi-byte rune).
func wordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= 0x80
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
