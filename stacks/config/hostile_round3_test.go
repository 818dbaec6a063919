package config_test

// The classes of issue #49: what a careful attacker or a tired operator
// types that got through before. One table per class, one rule per class
// in the loader; each case is a spelling no other case of its class
// covers, and each was seen failing with its rule removed.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/stacks/config"
	"github.com/milner/milner/stacks/config/configtest"
)

// TestShellAndTemplateValues (class 1): what vault-helm hands a shell is
// allow-listed, what it or the woodpecker chart renders with tpl holds no
// template action, and Vault's pod runs no command Milner did not render.
func TestShellAndTemplateValues(t *testing.T) {
	vault := func(path string, v any) func(c obj) { return func(c obj) { set(asVault(c), path, v) } }
	wp := func(path string, v any) func(c obj) { return func(c obj) { set(asWoodpecker(c), path, v) } }
	const args = "milner:apps[0].values.server.extraArgs: "
	runRefusals(t, []refusalCase{
		{"command substitution", vault("server.extraArgs", "-log-level=info $(printf -- -dev)"), args + `"$(printf" is not one of the Vault server flags`},
		{"IFS between a flag's parts", vault("server.extraArgs", "-log-level=info${IFS}-dev"), args + `"-log-level=info${IFS}-dev" is not one of the Vault server flags`},
		{"backquotes", vault("server.extraArgs", "`echo -dev`"), args + "\"`echo\" is not one of the Vault server flags"},
		{"a flag as a list", vault("server.extraArgs", []any{"-dev"}), args + `"[-dev]" is not one of the Vault server flags`},
		{"a shell in the preStop sleep", vault("server.preStopSleepSeconds", "5; vault server -dev &"),
			`milner:apps[0].values.server.preStopSleepSeconds: "5; vault server -dev &" is not a whole number of seconds`},
		{"a dev server started after start", vault("server.postStart", []any{"/bin/sh", "-c", "vault server -dev &"}),
			"milner:apps[0].values.server.postStart: runs commands in or beside Vault's server"},
		{"a dev server in a sidecar", vault("server.extraContainers", []any{obj{"name": "dev", "image": "hashicorp/vault", "args": []any{"server", "-dev"}}}),
			"milner:apps[0].values.server.extraContainers: runs commands in or beside Vault's server"},
		{"a dev server in an init container", vault("server.extraInitContainers", []any{obj{"name": "dev", "image": "hashicorp/vault"}}),
			"milner:apps[0].values.server.extraInitContainers: runs commands in or beside Vault's server"},
		{"a dev server as the liveness probe", vault("server.livenessProbe.execCommand", []any{"/bin/sh", "-c", "vault server -dev &"}),
			"milner:apps[0].values.server.livenessProbe.execCommand: runs commands in or beside Vault's server"},
		{"lookup in a tpl string", vault("server.annotations", `x: {{ (lookup "v1" "Secret" "kube-system" "bootstrap-token").data }}`),
			"milner:apps[0].values.server.annotations: holds a template action"},
		{"lookup in the injector's tolerations", vault("injector.tolerations", `{{ lookup "v1" "Secret" "" "" }}`),
			"milner:apps[0].values.injector.tolerations: holds a template action"},
		{"lookup inside a woodpecker init container", wp("server.initContainers", []any{obj{"name": "x", "args": []any{`{{ lookup "v1" "Secret" "" "" }}`}}}),
			"milner:apps[1].values.server.initContainers[0].args[0]: holds a template action"},
	})
}

// TestShellAndTemplateValuesAllowWhatTheyList: the allowed flags, a whole
// number, maps where tpl strings were, and literal strings pass.
func TestShellAndTemplateValuesAllowWhatTheyList(t *testing.T) {
	c := baseConfig()
	v := asVault(c)
	set(v, "server.extraArgs", "-log-level=debug --log-format=json -exit-on-core-shutdown")
	set(v, "server.preStopSleepSeconds", 5)
	set(v, "server.annotations", obj{"team": "platform"})
	set(v, "injector.nodeSelector", "kubernetes.io/os: linux")
	requireNoProblemFrom(t, c, "extraArgs", "preStopSleepSeconds", "annotations", "nodeSelector")
}

// TestCredentialHosts (class 2): a host that receives a credential is
// ASCII, and plain http:// goes only to loopback or the libvirt host.
func TestCredentialHosts(t *testing.T) {
	forge := func(u string) func(c obj) {
		return func(c obj) { asWoodpecker(c); at(c, "apps", 1, "woodpecker", "forge")["url"] = u }
	}
	runRefusals(t, []refusalCase{
		{"a Cyrillic letter in the forge host", forge("https://forgе.example.org"),
			`milner:apps[1].woodpecker.forge.url: "https://forgе.example.org" has a host that is not plain ASCII ("forgе.example.org")`},
		{"a look-alike Woodpecker host", func(c obj) { asWoodpecker(c); at(c, "apps", 1, "woodpecker")["host"] = "https://ci.ехample.org" },
			`milner:apps[1].woodpecker.host: "https://ci.ехample.org" has a host that is not plain ASCII`},
		{"a percent-escaped host", forge("https://forge%2Eexample.org"),
			`milner:apps[1].woodpecker.forge.url: "https://forge%2Eexample.org" has a host that is not plain ASCII`},
		{"a look-alike OIDC issuer", func(c obj) {
			at(c, "cluster")["oidc"] = obj{"issuerUrl": "https://ѕso.example.org/realms/site", "clientId": "k", "usernameClaim": "email", "groupsClaim": "groups"}
		}, `milner:cluster.oidc.issuerUrl: "https://ѕso.example.org/realms/site" has a host that is not plain ASCII`},
		{"the forge over http to a remote host", forge("http://forge.example.org"),
			`milner:apps[1].woodpecker.forge.url: "http://forge.example.org" is plain http:// to forge.example.org`},
		{"the forge over http to another address of the node network", forge("http://10.9.0.7:3000"),
			`milner:apps[1].woodpecker.forge.url: "http://10.9.0.7:3000" is plain http:// to 10.9.0.7`},
		{"Woodpecker over http", func(c obj) { asWoodpecker(c); at(c, "apps", 1, "woodpecker")["host"] = "http://ci.example.org" },
			`milner:apps[1].woodpecker.host: "http://ci.example.org" is plain http://`},
	})
}

// TestProxmoxEndpointHostIsASCII: the Proxmox API token goes to the
// endpoint's host.
func TestProxmoxEndpointHostIsASCII(t *testing.T) {
	requireProblem(t, pxBase(), func(c obj) { at(c, "substrate", "proxmox")["endpoint"] = "https://pve-1.home.аrpa:8006/" },
		`milner:substrate.proxmox.endpoint: "https://pve-1.home.аrpa:8006/" has a host that is not plain ASCII ("pve-1.home.аrpa:8006"): a look-alike letter or an escape can name another host than it reads as, and that host gets the Proxmox VE API token; write the host in ASCII (its punycode is pve-1.home.xn--rpa-5cd`, pxSecrets)
}

// TestCredentialHostsAllowLocalClearText: http:// to loopback or the
// libvirt host (the dev forge on the NAT gateway) and punycode pass.
func TestCredentialHostsAllowLocalClearText(t *testing.T) {
	for _, u := range []string{"http://10.9.0.1:3000", "http://127.0.0.1:3000", "http://localhost:3000", "https://xn--frge-5qa.example.org"} {
		c := baseConfig()
		asWoodpecker(c)
		at(c, "apps", 1, "woodpecker", "forge")["url"] = u
		requireNoProblemFrom(t, c, "forge.url")
	}
}

// TestJoinedLists (class 3): an entry of a list Woodpecker reads as one
// comma-joined setting is one forge name.
func TestJoinedLists(t *testing.T) {
	admins := func(v any) func(c obj) {
		return func(c obj) { asWoodpecker(c); at(c, "apps", 1, "woodpecker")["admins"] = v }
	}
	runRefusals(t, []refusalCase{
		{"a comma makes two admins", admins([]any{"alice,mallory"}), `milner:apps[1].woodpecker.admins[0]: "alice,mallory" is not one forge user name`},
		{"a newline", admins([]any{"alice\nmallory"}), `milner:apps[1].woodpecker.admins[0]: "alice\nmallory" is not one forge user name`},
		{"a wildcard", admins([]any{"*"}), `milner:apps[1].woodpecker.admins[0]: "*" is not one forge user name`},
		{"an empty entry", admins([]any{"alice", ""}), `milner:apps[1].woodpecker.admins[1]: "" is not one forge user name`},
		{"an empty list", admins([]any{}), "milner:apps[1].woodpecker.admins: is an empty list: it names no admin"},
		{"an org filter that names no org", func(c obj) {
			v := asWoodpecker(c)
			set(v, "server.env.WOODPECKER_OPEN", true)
			set(v, "server.env.WOODPECKER_ORGS", " , ")
		}, `milner:apps[1].values.server.env.WOODPECKER_ORGS: " , " does not list organizations`},
	})
}

// TestHiddenOrDroppedValues (class 4): a misspelt milner: key is refused
// naming the nearest key (it would drop its whole section), and an
// explicit zero is refused, never defaulted.
func TestHiddenOrDroppedValues(t *testing.T) {
	node := func(field string, v any) func(c obj) { return func(c obj) { at(c, "nodes", 0)[field] = v } }
	runRefusals(t, []refusalCase{
		{"milner:workload for milner:workloads", func(c obj) { c["workload"] = obj{"quota": obj{"requests.cpu": "1", "requests.memory": "1Gi"}} },
			"milner:workload: is not a key Milner reads, so its value would be silently ignored (did you mean milner:workloads?)"},
		{"a key in another case", func(c obj) { c["chartmirrors"] = obj{} }, "milner:chartmirrors: is not a key Milner reads"},
		{"a key nothing is like", func(c obj) { c["quotas"] = "x" }, "milner:quotas: is not a key Milner reads, so its value would be silently ignored; every key"},
		{"an explicit zero memory", node("memoryMiB", 0), "milner:nodes[0].memoryMiB: 0 is what an unset key reads as, so the program would use the default (2048)"},
		{"an explicit zero disk", node("dataDiskGiB", 0), "milner:nodes[0].dataDiskGiB: 0 is what an unset key reads as"},
		{"an explicit zero vcpu as 0.0", node("vcpu", 0.0), "milner:nodes[0].vcpu: 0 is what an unset key reads as"},
		{"an empty namespace", func(c obj) { at(c, "apps", 0)["namespace"] = "" }, `milner:apps[0].namespace: "" is what an unset key reads as`},
		{"a null storage class", func(c obj) { c["storage"] = obj{"storageClass": nil} }, "milner:storage.storageClass: null is what an unset key reads as"},
		{"an empty nameserver list", func(c obj) { at(c, "network")["nameservers"] = []any{} }, "milner:network.nameservers: [] is what an unset key reads as"},
		{"zero vault replicas", func(c obj) { asVault(c); at(c, "apps", 0, "vault")["replicas"] = 0 }, "milner:apps[0].vault.replicas: 0 is what an unset key reads as"},
		{"a null username prefix", func(c obj) {
			at(c, "cluster")["oidc"] = obj{"issuerUrl": "https://sso.example.org", "clientId": "k", "usernameClaim": "sub", "groupsClaim": "groups", "usernamePrefix": nil}
		}, "milner:cluster.oidc.usernamePrefix: null is what an unset key reads as"},
	})
}

// TestExplicitValuesAreKept: a pointer's false and a written value that
// equals the default are kept as written.
func TestExplicitValuesAreKept(t *testing.T) {
	c := baseConfig()
	at(c, "cluster")["allowSchedulingOnControlPlanes"] = false
	at(c, "nodes", 0)["vcpu"] = 2
	cfg, err := configtest.Load(raw(t, c), "milner:vaultToken")
	require.NoError(t, err)
	assert.False(t, *cfg.Cluster.AllowSchedulingOnControlPlanes)
}

// TestPlainCredentials (class 5): a credential by its shape in any plain
// value, in a key nobody reads, in another namespace; a secret key of
// Milner's stored in plain text whether or not the stack needs it.
func TestPlainCredentials(t *testing.T) {
	const pem = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaA==\n-----END OPENSSH PRIVATE KEY-----\n"
	for _, tc := range []struct {
		name, key, value, want string
	}{
		{"a token in another namespace", "github:token", "ghp_0123456789abcdefghijABCDEFGHIJ012345",
			"github:token: holds a token in plain text"},
		{"a token as a URL's user in another namespace", "libvirt:uri", "qemu+ssh://ghp_0123456789abcdefghijABCDEFGHIJ012345@hv/system",
			"libvirt:uri: carries a credential as its user name (qemu+ssh://xxxxx@hv/system)"},
		{"a Proxmox token in a provider's key", "proxmoxve:apiToken", "root@pam!ci=3f0c9b1e-6a2d-4c8e-9f71-0d5b2a4e8c13",
			"proxmoxve:apiToken: holds a Proxmox VE API token in plain text; store it with `pulumi config set --secret proxmoxve:apiToken`"},
		{"a private key in an object of another namespace", "talos:extra", `{"keys":{"ssh":"` + strings.ReplaceAll(pem, "\n", `\n`) + `"}}`,
			"talos:extra.keys.ssh: holds a private key in plain text"},
		{"a password in a URL of an unread key", "kubernetes:registry", "https://bot:hunter2@registry.example.org",
			"kubernetes:registry: carries a password in plain text (https://bot:xxxxx@registry.example.org)"},
		{"a Proxmox token on a libvirt stack", "milner:proxmoxApiToken", "root@pam!ci=3f0c9b1e-6a2d-4c8e-9f71-0d5b2a4e8c13",
			"milner:proxmoxApiToken: is stored in plain text; run `pulumi config set --secret milner:proxmoxApiToken <value>`"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := raw(t, baseConfig())
			r[tc.key] = tc.value
			_, err := configtest.Load(r, "milner:vaultToken")
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.NotContains(t, err.Error(), "hunter2")
		})
	}
}

// TestAddresses (class 6): a resolver the IPv4 node network cannot reach;
// a load-balancer range inside the DHCP range; a host port in a list.
func TestAddresses(t *testing.T) {
	runRefusals(t, []refusalCase{
		{"an IPv6 resolver", func(c obj) { at(c, "network")["nameservers"] = []any{"2001:db8::53"} },
			"milner:network.nameservers[0]: 2001:db8::53 is not an IPv4 address, and the node network 10.9.0.0/24 is IPv4 only"},
		{"an IPv4-mapped IPv6 resolver", func(c obj) { at(c, "network")["nameservers"] = []any{"::ffff:10.9.0.53"} },
			"milner:network.nameservers[0]: ::ffff:10.9.0.53 is not an IPv4 address"},
		{"a VIP range inside the DHCP range", func(c obj) { at(c, "network")["vipRange"] = obj{"start": "10.9.0.150", "end": "10.9.0.160"} },
			"milner:network.vipRange: overlaps dhcpRange 10.9.0.100-10.9.0.199"},
		{"a host port in a list of lists", func(c obj) { set(asVault(c), "server.extraPorts", []any{[]any{obj{"hostPort": 8200}}}) },
			"milner:apps[0].values.server.extraPorts[0][0].hostPort: opens the app beyond the cluster network"},
	})
}

// TestOIDCNames (class 7): names the apply alone would refuse.
func TestOIDCNames(t *testing.T) {
	oidc := func(field string, v any) func(c obj) {
		return func(c obj) {
			o := obj{"issuerUrl": "https://sso.example.org", "clientId": "kubernetes", "usernameClaim": "sub", "groupsClaim": "groups"}
			o[field] = v
			at(c, "cluster")["oidc"] = o
		}
	}
	const op = "milner:cluster.oidc."
	runRefusals(t, []refusalCase{
		{"a group with a blank", oidc("groupBindings", obj{"platform admins": "cluster-admin"}), op + `groupBindings[platform admins]: group "platform admins" cannot be part of its ClusterRoleBinding's name`},
		{"a group with a colon and upper case is fine but a trailing dot is not", oidc("groupBindings", obj{"admins.": "view"}), op + `groupBindings[admins.]: group "admins." cannot be part`},
		{"a wildcard group", oidc("groupBindings", obj{"*": "view"}), op + `groupBindings[*]: group "*" is a wildcard, which RBAC does not have`},
		{"a ClusterRole with a blank", oidc("groupBindings", obj{"admins": "cluster admin"}), op + `groupBindings[admins]: "cluster admin" is not a ClusterRole name`},
		{"a client id with a blank", oidc("clientId", "kube rnetes"), op + `clientId: "kube rnetes" has a character the API server's --oidc flag or kubelogin's argument does not carry`},
		{"a claim with a comma", oidc("groupsClaim", "groups,roles"), op + `groupsClaim: "groups,roles" has a character`},
	})
}

// TestFilesChosen (class 8): a boot image is a disk image outside the
// system and credential trees; a knownhosts= file only its owner changes.
func TestFilesChosen(t *testing.T) {
	img := func(p string) func(c obj) { return func(c obj) { at(c, "substrate", "libvirt")["bootImage"] = p } }
	dir := t.TempDir()
	open := filepath.Join(dir, "known_hosts")
	require.NoError(t, os.WriteFile(open, nil, 0o666))
	require.NoError(t, os.Chmod(open, 0o666))
	shared := filepath.Join(dir, "shared")
	require.NoError(t, os.Mkdir(shared, 0o777))
	require.NoError(t, os.Chmod(shared, 0o777|os.ModeSticky))
	uri := func(q string) func(c obj) {
		return func(c obj) { at(c, "substrate", "libvirt")["uri"] = "qemu+ssh://root@hv1.lan/system?" + q }
	}
	const sp = "milner:substrate.libvirt."
	runRefusals(t, []refusalCase{
		{"the shadow file", img("/etc/shadow"), sp + `bootImage: "/etc/shadow" is not a disk image file`},
		{"an image in /etc", img("/etc/talos.raw"), sp + `bootImage: "/etc/talos.raw" is in /etc`},
		{"an image in root's home", img("/root/talos.qcow2"), sp + `bootImage: "/root/talos.qcow2" is in /root`},
		{"an image in a hidden directory", img("/home/op/.ssh/id.img"), sp + `bootImage: "/home/op/.ssh/id.img" is in a hidden directory`},
		{"known hosts anyone can write", uri("knownhosts=" + open), sp + "uri: knownhosts=" + open + ": " + open + " is writable by others (mode 0666)"},
		{"known hosts in a directory anyone can write", uri("KnownHosts=" + filepath.Join(shared, "kh")), sp + "uri: knownhosts=" + filepath.Join(shared, "kh") + ": " + shared + " is writable by others"},
		{"known hosts relative", uri("knownhosts=known_hosts"), sp + `uri: knownhosts="known_hosts" is not a clean absolute path`},
	})
}

// TestFilesChosenAllowImagesAndPrivateKnownHosts: a disk image in an
// ordinary directory and a private known_hosts pass.
func TestFilesChosenAllowImagesAndPrivateKnownHosts(t *testing.T) {
	dir := t.TempDir()
	kh := filepath.Join(dir, "known_hosts")
	require.NoError(t, os.WriteFile(kh, nil, 0o600))
	require.NoError(t, os.Chmod(dir, 0o700))
	c := baseConfig()
	at(c, "substrate", "libvirt")["uri"] = "qemu+ssh://root@hv1.lan/system?knownhosts=" + kh
	at(c, "substrate", "libvirt")["bootImage"] = "/var/lib/milner/images/metal-amd64.raw"
	_, err := configtest.Load(raw(t, c), "milner:vaultToken")
	require.NoError(t, err)
}

// TestEveryDeclaredKeyIsKnown: Pulumi.yaml declares exactly the keys the
// loader knows (config.Keys and config.SecretKeys): a key declared there
// and refused here, or read here and undeclared there, would be a drift.
func TestEveryDeclaredKeyIsKnown(t *testing.T) {
	b, err := os.ReadFile("../../Pulumi.yaml")
	require.NoError(t, err)
	var declared []string
	for _, line := range strings.Split(string(b), "\n") {
		if k, ok := strings.CutPrefix(line, "  milner:"); ok && strings.HasSuffix(k, ":") {
			declared = append(declared, strings.TrimSuffix(k, ":"))
		}
	}
	assert.ElementsMatch(t, append(append([]string{}, config.Keys...), config.SecretKeys...), declared)
}
