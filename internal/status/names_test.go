package status

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/components/substrate"
	"github.com/milner/milner/stacks/config"
	"github.com/milner/milner/stacks/config/configtest"
)

// exposed loads the base config with its app made an exposed Vault, on
// the substrate kind's network; the TLS keys are placeholders (unchecked).
func exposed(t *testing.T) *config.Config {
	t.Helper()
	c := configtest.Base()
	app := configtest.At(c, "apps", 0)
	app["chart"] = configtest.Obj{"repo": "https://helm.releases.hashicorp.com", "name": "vault", "version": "0.29.1"}
	app["vault"] = configtest.Obj{"replicas": 1}
	app["expose"] = configtest.Obj{"host": "vault.milner.internal", "address": "10.9.0.241"}
	delete(app, "secretValues")
	r := configtest.Raw(t, c)
	r["milner:vaultTlsCert"], r["milner:vaultTlsKey"], r["milner:vaultTlsCa"] = config.PlaceholderSecret, config.PlaceholderSecret, config.PlaceholderSecret
	cfg, err := configtest.Load(r, "milner:vaultTlsCert", "milner:vaultTlsKey", "milner:vaultTlsCa")
	require.NoError(t, err)
	return cfg
}

// TestNamesOnLibvirt: a libvirt stack's names are answered by its
// network's DNS (the network's first address, on its bridge); status says
// how to point the workstation's resolver at it, or the hosts lines.
func TestNamesOnLibvirt(t *testing.T) {
	n := NamesOf(exposed(t))
	require.NotNil(t, n)
	br := substrate.BridgeName("t")
	assert.Equal(t, &Names{Hosts: []Name{{App: "vault", Host: "vault.milner.internal", Address: "10.9.0.241"}}, Resolver: "10.9.0.1", Bridge: br}, n)
	var b bytes.Buffer
	n.Write(&b)
	assert.Equal(t, `names (the network's DNS at 10.9.0.1 answers them):
  vault.milner.internal        10.9.0.241
  resolve them through it (systemd-resolved):
    sudo resolvectl dns `+br+` 10.9.0.1
    sudo resolvectl domain `+br+` '~vault.milner.internal'
  or add these lines to /etc/hosts:
    10.9.0.241 vault.milner.internal
`, b.String())
}

// TestNamesOnTheSite: elsewhere (prod) the names are records to add to
// the site's DNS; a stack without an exposed app has no names.
func TestNamesOnTheSite(t *testing.T) {
	var b bytes.Buffer
	(&Names{Hosts: []Name{{App: "vault", Host: "vault.home.arpa", Address: "192.168.1.241"}, {App: "v6", Host: "v6.home.arpa", Address: "fd00::241"}}}).Write(&b)
	assert.Equal(t, `names (add these records to the site's DNS):
  vault.home.arpa. IN A 192.168.1.241
  v6.home.arpa. IN AAAA fd00::241
`, b.String())

	cfg := exposed(t)
	cfg.Apps[0].Expose = nil
	assert.Nil(t, NamesOf(cfg))
}
