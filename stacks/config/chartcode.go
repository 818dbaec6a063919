package config

// Chart values that a chart runs as code (issue #49, class 1). A pattern
// cannot tell what a shell or a template makes of a string: vault-helm
// runs server.extraArgs through `sh -ec`, where $(...), `...` and ${IFS}
// build any flag, -dev included, out of characters no pattern names; and
// it renders many string values with Helm's tpl, where `lookup` reads the
// cluster's Secrets at render time with the provider's credentials. So
// these values are allow-listed: what they may hold is spelled out, and
// everything else is refused.
//
// Read from the charts Milner pins (vault-helm 0.29.1 templates/,
// woodpecker 3.2.0 charts/*/templates/):
//   - vault-helm _helpers.tpl "vault.args": server.extraArgs is appended to
//     `docker-entrypoint.sh vault server -config=...` in the args of the
//     container's `/bin/sh -ec` (server-statefulset.yaml);
//   - server-statefulset.yaml preStop: server.preStopSleepSeconds is
//     interpolated into `/bin/sh -c "sleep <it> && kill -SIGTERM ..."`;
//   - server-statefulset.yaml: server.postStart and
//     server.livenessProbe.execCommand are commands run in the Vault
//     container, server.extraContainers and server.extraInitContainers
//     containers of their own in Vault's pod (its volumes, its network):
//     any of them can start a second, dev-mode server that Milner cannot
//     read the command line of;
//   - _helpers.tpl: the values below are rendered with `tpl` when they are
//     strings (a map or a list is written with toYaml instead);
//   - woodpecker charts/server and charts/agent statefulset.yaml:
//     initContainers is rendered with `tpl (toYaml ...)`, every string in it.

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// vaultTemplated are vault-helm 0.29.1's values rendered with tpl when a
// string (_helpers.tpl, each `tpl .Values.<path> .`).
var vaultTemplated = []string{
	"server.affinity", "server.topologySpreadConstraints", "server.tolerations", "server.nodeSelector",
	"server.annotations", "server.statefulSet.annotations", "server.statefulSet.securityContext.pod",
	"server.statefulSet.securityContext.container", "server.serviceAccount.annotations",
	"server.ingress.annotations", "server.route.annotations", "server.service.annotations",
	"server.service.active.annotations", "server.service.standby.annotations",
	"server.dataStorage.annotations", "server.dataStorage.labels", "server.auditStorage.annotations", "server.auditStorage.labels",
	"injector.affinity", "injector.topologySpreadConstraints", "injector.tolerations", "injector.nodeSelector",
	"injector.strategy", "injector.annotations", "injector.service.annotations", "injector.securityContext.pod",
	"injector.securityContext.container", "injector.serviceAccount.annotations", "injector.webhook.annotations",
	"injector.webhookAnnotations", "injector.webhook.objectSelector", "injector.objectSelector",
	"ui.annotations", "global.psp.annotations",
	"csi.daemonSet.annotations", "csi.daemonSet.securityContext.pod", "csi.daemonSet.securityContext.container",
	"csi.pod.tolerations", "csi.pod.nodeSelector", "csi.pod.affinity", "csi.pod.annotations", "csi.serviceAccount.annotations",
}

// vaultCommands are vault-helm 0.29.1's values that run commands or
// containers in or beside the Vault server's pod: the hardened Vault runs
// only what Milner renders.
var vaultCommands = []string{"server.postStart", "server.livenessProbe.execCommand", "server.extraContainers", "server.extraInitContainers"}

// woodpeckerTemplated are woodpecker 3.2.0's values rendered with
// tpl (toYaml ...): every string inside them.
var woodpeckerTemplated = []string{"server.initContainers", "agent.initContainers"}

// vaultServerFlag is one allowed argument of server.extraArgs: the Vault
// server flags that change logging or shutdown only (vault server -h:
// -log-level, -log-format, -exit-on-core-shutdown), with a plain word as
// value. Nothing else reaches `sh -ec`: no quote, no $, no backquote, no
// other flag (-dev, -config).
var vaultServerFlag = regexp.MustCompile(`^--?(log-level=(trace|debug|info|warn|error)|log-format=(standard|json)|exit-on-core-shutdown)$`)

// checkChartCode is the rule of this file.
func (c *Config) checkChartCode(p *problems) {
	for i, a := range c.Apps {
		vp := fmt.Sprintf("%s[%d].values", Key("apps"), i)
		if a.Vault != nil || a.Chart.Name == VaultChart {
			checkVaultShell(p, vp, a.Values)
			for _, path := range vaultCommands {
				if v, ok := lookupPath(a.Values, path); ok && v != nil {
					p.addf(vp+"."+path, "runs commands in or beside Vault's server (vault-helm server-statefulset.yaml), which can start a second server in dev mode or with a listener without TLS that Milner cannot see; Milner's hardened Vault runs only what Milner renders: remove it")
				}
			}
			for _, path := range vaultTemplated {
				if v, ok := lookupPath(a.Values, path); ok {
					checkNoTemplate(p, vp+"."+path, v, "vault-helm renders this string with tpl (_helpers.tpl); give it as a YAML map or list, which the chart writes with toYaml")
				}
			}
		}
		if a.Woodpecker != nil || a.Chart.Name == WoodpeckerChart {
			for _, path := range woodpeckerTemplated {
				if v, ok := lookupPath(a.Values, path); ok {
					checkNoTemplate(p, vp+"."+path, v, "the woodpecker chart renders it with tpl (statefulset.yaml); write the values themselves")
				}
			}
		}
	}
}

// checkVaultShell allow-lists what vault-helm hands the container's shell.
func checkVaultShell(p *problems, vp string, values map[string]any) {
	if args, ok := lookupPath(values, "server.extraArgs"); ok && args != nil {
		var words []string
		switch t := args.(type) {
		case string:
			words = strings.FieldsFunc(t, func(r rune) bool { return r == ' ' })
		default:
			words = []string{fmt.Sprint(t)} // a list or a map is rendered by Go's fmt, never a flag list
		}
		for _, w := range words {
			if !vaultServerFlag.MatchString(w) {
				p.addf(vp+".server.extraArgs", "%q is not one of the Vault server flags Milner allows there (-log-level=<level>, -log-format=standard|json, -exit-on-core-shutdown): the chart appends server.extraArgs to `vault server -config=...` inside `/bin/sh -ec` (vault-helm _helpers.tpl \"vault.args\"), where quotes, $(...), backquotes and ${IFS} make any flag, -dev (in memory, unsealed, a known root token) and another -config (a listener without TLS) among them; remove it", w)
				break
			}
		}
	}
	if v, ok := lookupPath(values, "server.preStopSleepSeconds"); ok && v != nil {
		if n, err := strconv.Atoi(scalar(v)); err != nil || n < 0 || scalar(v) != strconv.Itoa(n) {
			p.addf(vp+".server.preStopSleepSeconds", "%q is not a whole number of seconds: the chart writes it into `/bin/sh -c \"sleep <it> && kill ...\"` (server-statefulset.yaml preStop), where anything else is shell", scalar(v))
		}
	}
}

// checkNoTemplate refuses a template action anywhere in a value a chart
// renders with tpl: a string without "{{" renders as itself (text/template
// with Helm's delimiters), one with it runs (lookup reads Secrets).
func checkNoTemplate(p *problems, at string, v any, fix string) {
	switch t := v.(type) {
	case string:
		if strings.Contains(t, "{{") {
			p.addf(at, "holds a template action ({{ ... }}), which Helm runs at render with the cluster's credentials (lookup reads any Secret into the manifest); %s", fix)
		}
	case map[string]any:
		for _, k := range sortedKeys(t) {
			checkNoTemplate(p, at+"."+k, t[k], fix)
			if strings.Contains(k, "{{") {
				p.addf(at+"."+k, "is a key holding a template action ({{ ... }}), which Helm runs at render; %s", fix)
			}
		}
	case []any:
		for i, e := range t {
			checkNoTemplate(p, fmt.Sprintf("%s[%d]", at, i), e, fix)
		}
	}
}
