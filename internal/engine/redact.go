package engine

import (
	"net/url"
	"slices"
	"strings"
	"sync"
)

// A backend URL can carry a credential: postgres://user:password@host/db,
// ?password=..., an object store's access key. Milner never prints one:
// Stack.Backend is the URL redacted, and Redact takes every credential of
// the URLs opened in this process out of any text (the errors milner
// prints), as pkg/v3's logging.AddGlobalSecretFilter does for its logs.

// redacted is what a credential is printed as (net/url's URL.Redacted).
const redacted = "xxxxx"

// credentialParams are query parameters of DIY backend URLs that hold a
// credential (lib/pq's password and sslpassword; gocloud's object-store
// keys and tokens). Matched as substrings, case-insensitively.
var credentialParams = []string{"password", "secret", "token", "key", "sig"}

var (
	credMu      sync.Mutex
	credentials = map[string]bool{}
)

// isCredential says whether a query parameter of a backend URL holds a
// credential.
func isCredential(param string) bool {
	return slices.ContainsFunc(credentialParams, func(c string) bool { return strings.Contains(strings.ToLower(param), c) })
}

// redactURL is raw with its credentials replaced by xxxxx.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "[a backend URL that does not parse]"
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), redacted)
	}
	q := u.Query()
	for k := range q {
		if isCredential(k) {
			q.Set(k, redacted)
			u.RawQuery = q.Encode()
		}
	}
	return strings.ReplaceAll(u.String(), url.QueryEscape(redacted), redacted)
}

// remember records raw's credentials for Redact.
func remember(raw string) {
	u, err := url.Parse(raw)
	if err != nil {
		return
	}
	credMu.Lock()
	defer credMu.Unlock()
	if p, ok := u.User.Password(); ok && p != "" {
		credentials[p] = true
		credentials[url.PathEscape(p)] = true
		credentials[url.QueryEscape(p)] = true
	}
	for k, vs := range u.Query() {
		for _, v := range vs {
			if v != "" && isCredential(k) {
				credentials[v] = true
				credentials[url.QueryEscape(v)] = true
			}
		}
	}
}

// Redact returns s with every credential of the backend URLs this process
// opened replaced by xxxxx.
func Redact(s string) string {
	credMu.Lock()
	defer credMu.Unlock()
	for c := range credentials {
		s = strings.ReplaceAll(s, c, redacted)
	}
	return s
}
