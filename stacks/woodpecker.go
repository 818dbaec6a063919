package stacks

import (
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/milner/milner/components/helmapp"
	"github.com/milner/milner/stacks/config"
)

// Woodpecker's Secrets: the server's ("<release>-server-env": the agent
// secret and the forge's OAuth client) and the agents' ("<release>-agent-env":
// the agent secret alone; agents never see the forge's credentials).
const (
	WoodpeckerServerSecret = "server-env"
	WoodpeckerAgentSecret  = "agent-env"
)

// woodpeckerProfile returns Woodpecker's chart values and the Secrets its
// server and agents read with envFrom. Keys checked against the
// woodpecker-ci/helm chart 3.x (charts/woodpecker/charts/server and agent
// values.yaml): server.createAgentSecret, server.extraSecretNamesForEnvFrom,
// server.env, server.persistentVolume.storageClass, agent.mapAgentSecret,
// agent.extraSecretNamesForEnvFrom, agent.env, agent.persistence.storageClass.
// Environment names are Woodpecker 3's forge settings
// (WOODPECKER_<FORGE>, _URL, _CLIENT, _SECRET).
func woodpeckerProfile(ctx *pulumi.Context, app config.AppConfig, storageClass string) (map[string]any, []helmapp.Secret) {
	w := app.Woodpecker
	forge := "WOODPECKER_" + strings.ToUpper(string(w.Forge.Kind))
	agentSecret := secret(ctx, config.WoodpeckerAgentSecretKey)
	server := map[string]any{
		// The chart would otherwise generate its own agent secret.
		"createAgentSecret":          false,
		"extraSecretNamesForEnvFrom": []any{helmapp.SecretName(app.ReleaseName, WoodpeckerServerSecret)},
		"env": map[string]any{
			"WOODPECKER_HOST":  w.Host,
			"WOODPECKER_ADMIN": strings.Join(w.Admins, ","),
			forge:              "true",
			forge + "_URL":     w.Forge.URL,
		},
	}
	agentEnv := map[string]any{
		// Pipelines run as pods in the app's namespace.
		"WOODPECKER_BACKEND_K8S_NAMESPACE": app.Namespace,
		// local-path volumes are ReadWriteOnce; the chart's default asks for RWX.
		"WOODPECKER_BACKEND_K8S_STORAGE_RWX": false,
	}
	agent := map[string]any{
		"mapAgentSecret":             false,
		"extraSecretNamesForEnvFrom": []any{helmapp.SecretName(app.ReleaseName, WoodpeckerAgentSecret)},
		"env":                        agentEnv,
	}
	if storageClass != "" {
		server["persistentVolume"] = map[string]any{"storageClass": storageClass}
		agent["persistence"] = map[string]any{"storageClass": storageClass}
		agentEnv["WOODPECKER_BACKEND_K8S_STORAGE_CLASS"] = storageClass
	}
	secrets := []helmapp.Secret{
		{Suffix: WoodpeckerServerSecret, Type: "Opaque", Data: pulumi.StringMap{
			"WOODPECKER_AGENT_SECRET": agentSecret,
			forge + "_CLIENT":         secret(ctx, config.WoodpeckerForgeClientKey),
			forge + "_SECRET":         secret(ctx, config.WoodpeckerForgeSecretKey),
		}},
		{Suffix: WoodpeckerAgentSecret, Type: "Opaque", Data: pulumi.StringMap{
			"WOODPECKER_AGENT_SECRET": agentSecret,
		}},
	}
	return map[string]any{"server": server, "agent": agent}, secrets
}
