package stacks

import (
	"fmt"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/milner/milner/components/helmapp"
	"github.com/milner/milner/stacks/config"
)

// VaultTLSSuffix names Vault's TLS Secret: "<release>-tls" (type
// kubernetes.io/tls, keys tls.crt, tls.key, ca.crt).
const VaultTLSSuffix = "tls"

// VaultTLSDir is where the TLS Secret is mounted in the Vault pods.
const VaultTLSDir = "/vault/userconfig/tls"

// vaultProfile returns the hardened Vault's chart values and its TLS
// Secret. Every key was checked against vault-helm's values.yaml (chart
// 0.29.1; the keys are unchanged through 0.30.x): global.tlsDisable,
// server.{dev,standalone,ha.{enabled,replicas,raft.{enabled,setNodeId,config}},
// dataStorage,auditStorage,volumes,volumeMounts,extraEnvironmentVars}.
//
// TLS: the certificate, key and CA are the operator's (secret keys
// VaultTLS*), written to a kubernetes.io/tls Secret mounted read-only.
// Rotating them is `pulumi config set --secret` and an up: the Secret is
// updated in place, the kubelet refreshes the mounted files, and Vault
// re-reads tls_cert_file/tls_key_file on SIGHUP (Vault's tcp listener
// docs mark both "reloads-on-SIGHUP"); no pod or release is recreated.
func vaultProfile(ctx *pulumi.Context, app config.AppConfig, storageClass string) (map[string]any, []helmapp.Secret) {
	v := app.Vault
	full := config.VaultFullname(app.ReleaseName)
	var joins strings.Builder
	for i := 0; i < v.Replicas; i++ {
		fmt.Fprintf(&joins, `
  retry_join {
    leader_api_addr     = "https://%s-%d.%s-internal:8200"
    leader_ca_cert_file = "%s/ca.crt"
  }`, full, i, full, VaultTLSDir)
	}
	// The raft config: TLS listener, integrated storage on the data PVC,
	// peers joining each other over TLS, Kubernetes service registration
	// (labels the active pod for the chart's vault-active service).
	hcl := fmt.Sprintf(`ui = true

listener "tcp" {
  address         = "[::]:8200"
  cluster_address = "[::]:8201"
  tls_cert_file   = "%[1]s/tls.crt"
  tls_key_file    = "%[1]s/tls.key"
  tls_min_version = "tls12"
}

storage "raft" {
  path = "/vault/data"%[2]s
}

service_registration "kubernetes" {}
`, VaultTLSDir, joins.String())

	var class any // nil: the cluster's default StorageClass
	if storageClass != "" {
		class = storageClass
	}
	volume := func(size string) map[string]any {
		return map[string]any{"enabled": true, "size": size, "storageClass": class}
	}
	values := map[string]any{
		"global": map[string]any{"tlsDisable": false},
		"server": map[string]any{
			"dev":        map[string]any{"enabled": false},
			"standalone": map[string]any{"enabled": false},
			"ha": map[string]any{
				"enabled":  true,
				"replicas": v.Replicas,
				"raft":     map[string]any{"enabled": true, "setNodeId": true, "config": hcl},
			},
			"dataStorage":  volume(v.DataSize),
			"auditStorage": volume(v.AuditSize),
			"volumes": []any{map[string]any{
				"name":   "tls",
				"secret": map[string]any{"secretName": helmapp.SecretName(app.ReleaseName, VaultTLSSuffix)},
			}},
			"volumeMounts":         []any{map[string]any{"name": "tls", "mountPath": VaultTLSDir, "readOnly": true}},
			"extraEnvironmentVars": map[string]any{"VAULT_CACERT": VaultTLSDir + "/ca.crt"},
		},
	}
	if e := app.Expose; e != nil {
		// The exposed Service is the chart's UI Service ("<fullname>-ui",
		// vault-helm templates/ui-service.yaml: the API and the UI on 8200,
		// every server pod, publishNotReadyAddresses true so a sealed pod
		// is reachable to unseal; a standby forwards to the active one).
		// server.service.type would also turn the -active and -standby
		// Services into LoadBalancers asking for the same address.
		values["ui"] = map[string]any{
			"enabled":     true,
			"serviceType": "LoadBalancer",
			"annotations": map[string]any{LBAddressAnnotation: e.Addr.String()},
		}
	}
	tls := helmapp.Secret{
		Suffix: VaultTLSSuffix,
		Type:   "kubernetes.io/tls",
		Data: pulumi.StringMap{
			"tls.crt": secret(ctx, config.VaultTLSCertKey),
			"tls.key": secret(ctx, config.VaultTLSKeyKey),
			"ca.crt":  secret(ctx, config.VaultTLSCAKey),
		},
	}
	return values, []helmapp.Secret{tls}
}
