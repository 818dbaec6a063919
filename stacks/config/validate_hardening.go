package config

// Values that undo hardening, however they are spelled (issue #33). Chart
// values are free-form, so the rule reads them as the charts and the
// programs in the pods will: environment variables in an env map or an
// env list, flags after a shell has removed its quoting, services by
// their type, credentials by their shape. Every refusal names the value's
// config path.

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/milner/milner/internal/redact"
)

// envName is how an environment variable is named in an env map.
var envName = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)

// tlsOffEnv are environment variables that turn TLS verification off when
// true: Vault's CLI and agent (VAULT_SKIP_VERIFY), Woodpecker's forge
// clients (WOODPECKER_<FORGE>_SKIP_VERIFY) and any *_INSECURE_SKIP_VERIFY /
// *_TLS_SKIP_VERIFY / *_SKIP_TLS_VERIFY setting.
var tlsOffEnv = regexp.MustCompile(`(^|_)(SKIP_VERIFY|SKIP_TLS_VERIFY|TLS_SKIP_VERIFY|INSECURE_SKIP_VERIFY|TLS_INSECURE|INSECURE_TLS)$`)

// tlsOffWhenFalse are environment variables that turn TLS verification off
// when false or 0: Node.js (NODE_TLS_REJECT_UNAUTHORIZED) and Python's
// stdlib (PYTHONHTTPSVERIFY).
var tlsOffWhenFalse = []string{"NODE_TLS_REJECT_UNAUTHORIZED", "PYTHONHTTPSVERIFY"}

// tlsOffKey is a chart value key (lowercased, without '_' and '-') that
// turns TLS verification off when true.
var tlsOffKey = regexp.MustCompile(`^(insecureskipverify|skiptlsverify|tlsskipverify|skipverify|tlsinsecure|insecuretls)$`)

// credentialKey is a chart value key (lowercased, without '_' and '-')
// whose plain value is a credential: the value belongs in secretValues.
var credentialKey = regexp.MustCompile(`(password|passwd|token|apikey|privatekey|clientsecret|agentsecret|accesskey|secretkey)$`)

// exposingKeys are the pod and Service settings that open a port beyond
// the cluster network: on every node's address (hostNetwork, hostPort,
// nodePort, externalIPs).
var exposingKeys = []string{"hostNetwork", "hostPort", "nodePort", "serviceNodePort", "externalIPs"}

// checkHardeningValues is the rule of this file.
func (c *Config) checkHardeningValues(p *problems) {
	owned := c.ownedNamespaces()
	for i, a := range c.Apps {
		ap := fmt.Sprintf("%s[%d]", Key("apps"), i)
		env := map[string]string{}
		walkValues(a.Values, ap+".values", func(at, key string, v any) {
			c.checkValue(p, at, key, v)
			if name, val, ok := envEntry(key, v); ok {
				env[name] = val
				checkEnv(p, at, name, val)
			}
		}, func(at string, m map[string]any) {
			// An env list entry: {name: X, value: Y}.
			if name, ok := m["name"].(string); ok && envName.MatchString(name) {
				if v, ok := m["value"]; ok {
					val := scalar(v)
					env[name] = val
					checkEnv(p, at+".value", name, val)
				}
			}
		})
		if a.Woodpecker != nil {
			checkWoodpeckerEnv(p, ap, a, env, owned)
		}
		if a.Chart.Path != "" {
			c.checkChartInProject(p, ap+".chart.path", a.Chart.Path)
		}
	}
	if s := c.Storage; s.On() && s.Chart.Path != "" {
		c.checkChartInProject(p, Key("storage")+".chart.path", s.Chart.Path)
	}
}

// checkValue checks one chart value: TLS verification switched off by a
// key, a port opened beyond the cluster, a Service of an exposing type,
// and a credential in plain text.
func (c *Config) checkValue(p *problems, at, key string, v any) {
	norm := strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(key))
	if tlsOffKey.MatchString(norm) && truthy(v) {
		p.addf(at, "turns TLS verification off; trust the server's CA instead")
	}
	if slices.Contains(exposingKeys, key) && exposes(v) {
		p.addf(at, "opens the app beyond the cluster network (on every node's address); Milner exposes an app only through a LoadBalancer in milner:network.vipRange")
	}
	if s, ok := v.(string); ok && (key == "type" || key == "serviceType") {
		switch {
		case s == "NodePort":
			p.addf(at, "NodePort opens the Service on every node's address; use ClusterIP, or a LoadBalancer with milner:network.vipRange declared")
		case s == "LoadBalancer" && !c.LBOn():
			p.addf(at, "LoadBalancer exposes the Service beyond the cluster, but the stack runs no load balancer (milner:network.vipRange, or milner:loadBalancer.pool on an existing cluster)")
		}
	}
	// A credential by its shape is checkPlainCredentials' (credentials.go).
	if s, ok := v.(string); ok && s != "" && !isBool(s) && !privateKey.MatchString(s) && !redact.TokenShaped(s) &&
		(credentialKey.MatchString(norm) || envName.MatchString(key) && strings.HasSuffix(key, "_SECRET")) {
		p.addf(at, "is a credential in plain text; put it in a secret key and map it with secretValues")
	}
}

// checkEnv refuses an environment variable that turns TLS verification off.
func checkEnv(p *problems, at, name, val string) {
	switch {
	case name == "GIT_SSL_NO_VERIFY":
		// git (http.c) turns verification off when the variable is set at
		// all, whatever its value.
		p.addf(at, "%s=%s turns git's TLS verification off (git reads it as set, whatever the value); trust the server's CA instead", name, val)
	case tlsOffEnv.MatchString(name) && truthy(val):
		p.addf(at, "%s=%s turns TLS verification off; trust the server's CA instead", name, val)
	case slices.Contains(tlsOffWhenFalse, name) && falsy(val):
		p.addf(at, "%s=%s turns TLS verification off; trust the server's CA instead", name, val)
	}
}

// checkWoodpeckerEnv refuses the Woodpecker settings that undo its
// profile (names as Woodpecker 3 reads them: cmd/server and cmd/agent
// flags, docs/30-administration): pipelines in a namespace that is the
// cluster's or another app's, the agent secret sent to a server other
// than the release's own, open registration without an organization
// filter, and privileged plugins.
func checkWoodpeckerEnv(p *problems, ap string, a AppConfig, env map[string]string, owned map[string]string) {
	at := func(name string) string {
		for _, comp := range []string{"agent", "server"} {
			if _, ok := lookupPath(a.Values, comp+".env."+name); ok {
				return ap + ".values." + comp + ".env." + name
			}
		}
		return ap + ".values"
	}
	if ns, ok := env["WOODPECKER_BACKEND_K8S_NAMESPACE"]; ok && ns != a.Namespace {
		switch other, taken := owned[ns]; {
		case isSystemNamespace(ns):
			p.addf(at("WOODPECKER_BACKEND_K8S_NAMESPACE"), "%q is a Kubernetes system namespace: pipelines (anyone's code) would run beside the control plane's objects; leave it to Milner (the app's namespace %q)", ns, a.Namespace)
		case taken:
			p.addf(at("WOODPECKER_BACKEND_K8S_NAMESPACE"), "%q is the namespace of %s: pipelines would run beside its pods and Secrets; leave it to Milner (the app's namespace %q)", ns, other, a.Namespace)
		}
	}
	if srv, ok := env["WOODPECKER_SERVER"]; ok && !ownWoodpeckerServer(srv, a) {
		p.addf(at("WOODPECKER_SERVER"), "%q is not this release's server (%s-server:9000): the agent sends it WOODPECKER_AGENT_SECRET and runs whatever pipelines it hands out; remove it", srv, a.ReleaseName)
	}
	if open, ok := env["WOODPECKER_OPEN"]; ok && truthy(open) && strings.TrimSpace(env["WOODPECKER_ORGS"]) == "" {
		p.addf(at("WOODPECKER_OPEN"), "opens registration to every account of the forge, and every user may add repositories whose pipelines run in the cluster; keep it closed (woodpecker.admins), or set WOODPECKER_ORGS to the organizations allowed")
	}
	if priv, ok := env["WOODPECKER_PLUGINS_PRIVILEGED"]; ok && strings.Trim(priv, " ,") != "" {
		p.addf(at("WOODPECKER_PLUGINS_PRIVILEGED"), "%q runs these plugin images privileged: any pipeline that names one gets root on its node; remove it", priv)
	}
}

// ownWoodpeckerServer reports whether a WOODPECKER_SERVER value is the
// release's own server Service on its gRPC port 9000 (the chart's
// woodpecker-server.fullname is <release>-server; a short, namespaced or
// fully qualified Service name).
func ownWoodpeckerServer(v string, a AppConfig) bool {
	svc := a.ReleaseName + "-server"
	for _, host := range []string{svc, svc + "." + a.Namespace, svc + "." + a.Namespace + ".svc", svc + "." + a.Namespace + ".svc.cluster.local"} {
		if v == host+":9000" {
			return true
		}
	}
	return false
}

// checkChartInProject refuses a local chart outside the project: the
// directory (symbolic links resolved) must lie in the project directory,
// where Pulumi.yaml is, so that the chart is reviewed and versioned with
// the stack. validateLocalChart reports a missing one.
func (c *Config) checkChartInProject(p *problems, at, dir string) {
	root := c.dir
	if root == "" {
		root = projectRoot()
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(c.dir, dir) // "" reads it from the working directory, as validateLocalChart does
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return
	}
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return
	}
	realRoot, err := filepath.EvalSymlinks(absRoot)
	if err != nil {
		return
	}
	if rel, err := filepath.Rel(realRoot, real); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		p.addf(at, "resolves to %s, outside the project directory %s: a chart is installed with the cluster's credentials, so it lives (reviewed, versioned) in the project; vendor it there", real, realRoot)
	}
}

// projectRoot is the working directory's nearest ancestor holding
// Pulumi.yaml (the project directory), else the working directory.
func projectRoot() string {
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "Pulumi.yaml")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return wd
		}
	}
}

// walkValues calls leaf for every key of values at any depth (with its
// config path) and list for every map inside a list.
func walkValues(values map[string]any, at string, leaf func(at, key string, v any), list func(at string, m map[string]any)) {
	for _, k := range sortedKeys(values) {
		v := values[k]
		kp := at + "." + k
		leaf(kp, k, v)
		walkAny(v, kp, leaf, list)
	}
}

func walkAny(v any, at string, leaf func(at, key string, v any), list func(at string, m map[string]any)) {
	switch t := v.(type) {
	case map[string]any:
		walkValues(t, at, leaf, list)
	case []any:
		for i, e := range t {
			ep := fmt.Sprintf("%s[%d]", at, i)
			if m, ok := e.(map[string]any); ok {
				list(ep, m)
			}
			if s, ok := e.(string); ok {
				leaf(ep, "", s)
			}
			walkAny(e, ep, leaf, list)
		}
	}
}

// envEntry reports an env-map entry: an upper-case name with a scalar value.
func envEntry(key string, v any) (name, val string, ok bool) {
	if !envName.MatchString(key) {
		return "", "", false
	}
	switch v.(type) {
	case map[string]any, []any:
		return "", "", false
	}
	return key, scalar(v), true
}

// scalar writes a YAML scalar as a process would see it in its environment.
func scalar(v any) string {
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

// truthy reports a value Go's strconv.ParseBool (the CLI flag libraries
// Vault and Woodpecker use) or YAML reads as true, or a non-zero number.
func truthy(v any) bool {
	s := strings.TrimSpace(scalar(v))
	if b, err := strconv.ParseBool(s); err == nil {
		return b
	}
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		return n != 0
	}
	return slices.Contains([]string{"yes", "on", "y"}, strings.ToLower(s))
}

// falsy reports a value read as false or zero.
func falsy(v any) bool {
	s := strings.TrimSpace(scalar(v))
	if b, err := strconv.ParseBool(s); err == nil {
		return !b
	}
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		return n == 0
	}
	return slices.Contains([]string{"no", "off", "n"}, strings.ToLower(s))
}

// isBool reports a string strconv.ParseBool reads.
func isBool(s string) bool {
	_, err := strconv.ParseBool(s)
	return err == nil
}

// exposes reports whether an exposing key's value opens anything: true, a
// port number, a non-empty list.
func exposes(v any) bool {
	switch t := v.(type) {
	case []any:
		return len(t) > 0
	case bool:
		return t
	case nil:
		return false
	}
	s := strings.TrimSpace(scalar(v))
	return s != "" && s != "0" && !falsy(s)
}
