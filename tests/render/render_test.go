package render

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	yamlutil "k8s.io/apimachinery/pkg/util/yaml"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"

	"github.com/milner/milner/components/helmapp"
	"github.com/milner/milner/internal/offline"
	"github.com/milner/milner/stacks"
	"github.com/milner/milner/stacks/config"
	"github.com/milner/milner/tests/offlinetest"
	"github.com/milner/milner/tests/testpki"
)

const (
	tRelease   = "kubernetes:helm.sh/v3:Release"
	tNamespace = "kubernetes:core/v1:Namespace"
	tSecret    = "kubernetes:core/v1:Secret"
)

// chartsDir is the static repository of the unmodified upstream charts:
// $MILNER_CHARTS_DIR, else ../shared/charts beside the repository.
func chartsDir(t *testing.T) string {
	dir := os.Getenv("MILNER_CHARTS_DIR")
	if dir == "" {
		dir = "../../../shared/charts"
	}
	if _, err := os.Stat(filepath.Join(dir, "index.yaml")); err != nil {
		if os.Getenv("CI") == "" {
			t.Skipf("the upstream charts are not at %s (set MILNER_CHARTS_DIR)", dir)
		}
		t.Fatal(err)
	}
	return dir
}

// testSecret is the value every plain secret key gets: a release's values
// must never hold it.
func testSecret(k string) string { return "s3cret-value-of-" + k }

// stack is one committed stack run under the recording mock.
type stack struct {
	name    string
	cfg     *config.Config
	rec     *offline.Recorder
	secrets map[string]string
}

// committedStacks runs the program on every Pulumi.<stack>.yaml with test
// values for the secrets it needs (a real certificate for Vault's).
func committedStacks(t *testing.T) []stack {
	t.Helper()
	files, err := filepath.Glob("../../Pulumi.*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var out []stack
	for _, f := range files {
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "Pulumi."), ".yaml")
		raw, err := offlinetest.ReadStackConfig(f)
		require.NoError(t, err)
		secrets := map[string]string{}
		src := source(raw)
		for _, need := range config.AppsSecrets(src) {
			secrets[config.Namespace+":"+need.Key] = testSecret(need.Key)
		}
		var apps []config.AppConfig
		_ = json.Unmarshal([]byte(raw["milner:apps"]), &apps)
		for _, a := range apps {
			if a.Vault != nil {
				rel, ns := a.Name, a.Name
				if a.ReleaseName != "" {
					rel = a.ReleaseName
				}
				if a.Namespace != "" {
					ns = a.Namespace
				}
				a.ReleaseName, a.Namespace = rel, ns
				b := testpki.Valid(a.VaultTLSNames()...)
				secrets["milner:"+config.VaultTLSCertKey], secrets["milner:"+config.VaultTLSKeyKey], secrets["milner:"+config.VaultTLSCAKey] = b.Cert, b.Key, b.CA
			}
		}
		if strings.Contains(raw["milner:substrate"], `"proxmox"`) {
			secrets["milner:"+config.ProxmoxTokenKey] = "milner@pve!render=" + testSecret("token")
		}
		maps.Copy(raw, secrets)
		cfg, err := config.Load(source(raw))
		require.NoError(t, err, name)
		rec, err := offline.Run(stacks.Program, name, raw, slices.Sorted(maps.Keys(secrets))...)
		require.NoError(t, err, name)
		out = append(out, stack{name: name, cfg: cfg, rec: rec, secrets: secrets})
	}
	return out
}

type source map[string]string

func (s source) GetConfig(k string) (string, bool) { v, ok := s[k]; return v, ok }
func (s source) IsConfigSecret(string) bool        { return true }

// plain strips secret markers.
func plain(v resource.PropertyValue) any {
	return v.MapRepl(nil, func(v resource.PropertyValue) (any, bool) {
		if v.IsSecret() {
			return plain(v.SecretValue().Element), true
		}
		return nil, false
	})
}

// rendered is one release's chart rendered with the program's values.
type rendered struct {
	release   string
	namespace string
	level     psaapi.Level
	chart     *chart.Chart
	values    map[string]any
	objects   []map[string]any
}

// render renders every release of a stack with Helm's engine as the
// provider's Helm would install it (helm.sh/helm/v3 v3.18.6 pkg/action
// install.go: chartutil.ToRenderValues, which validates the values against
// values.schema.json, then engine.Render), from the upstream archive of the
// chart and version the release pins.
func render(t *testing.T, s stack) []rendered {
	t.Helper()
	dir := chartsDir(t)
	var out []rendered
	for _, r := range s.rec.ByType(tRelease) {
		in := r.Inputs
		require.False(t, in["values"].ContainsSecrets(), "%s %s: a secret is in the release's values", s.name, r.Name)
		values, _ := plain(in["values"]).(map[string]any)
		if values == nil {
			values = map[string]any{}
		}
		vb, err := json.Marshal(values)
		require.NoError(t, err)
		for k, v := range s.secrets {
			require.NotContains(t, string(vb), v, "%s %s: the value of %s is in the release's values", s.name, r.Name, k)
		}
		ref := in["chart"].StringValue()
		name := ref[strings.LastIndex(ref, "/")+1:]
		version := in["version"].StringValue()
		archive := filepath.Join(dir, fmt.Sprintf("%s-%s.tgz", name, version))
		ch, err := loader.Load(archive)
		require.NoError(t, err, "%s %s: chart %s %s", s.name, r.Name, name, version)
		ns := plain(in["namespace"]).(string)
		relName := in["name"].StringValue()
		objs, err := renderChart(ch, relName, ns, s.cfg.Cluster.KubernetesVersion, values)
		require.NoError(t, err, "%s %s", s.name, r.Name)
		out = append(out, rendered{release: relName, namespace: ns, level: namespaceLevel(t, s, ns), chart: ch, values: values, objects: objs})
	}
	return out
}

// renderChart renders ch as an install of release into ns would.
func renderChart(ch *chart.Chart, release, ns, kubeVersion string, values map[string]any) ([]map[string]any, error) {
	caps := chartutil.DefaultCapabilities.Copy()
	if kubeVersion != "" {
		kv, err := chartutil.ParseKubeVersion(kubeVersion)
		if err != nil {
			return nil, err
		}
		caps.KubeVersion = *kv
	}
	vals, err := chartutil.ToRenderValues(ch, values, chartutil.ReleaseOptions{Name: release, Namespace: ns, Revision: 1, IsInstall: true}, caps)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(ch, vals)
	if err != nil {
		return nil, err
	}
	var objs []map[string]any
	for _, path := range slices.Sorted(maps.Keys(files)) {
		if !strings.HasSuffix(path, ".yaml") && !strings.HasSuffix(path, ".yml") {
			continue
		}
		dec := yamlutil.NewYAMLOrJSONDecoder(strings.NewReader(files[path]), 4096)
		for {
			var o map[string]any
			if err := dec.Decode(&o); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			if len(o) > 0 {
				objs = append(objs, o)
			}
		}
	}
	return objs, nil
}

// namespaceLevel is the Pod Security level the program's Namespace enforces.
func namespaceLevel(t *testing.T, s stack, ns string) psaapi.Level {
	t.Helper()
	for _, n := range s.rec.ByType(tNamespace) {
		meta := plain(n.Inputs["metadata"]).(map[string]any)
		if meta["name"] == ns {
			labels, _ := meta["labels"].(map[string]any)
			l, err := psaapi.ParseLevel(fmt.Sprint(labels[psaapi.EnforceLevelLabel]))
			require.NoError(t, err, "namespace %s", ns)
			return l
		}
	}
	t.Fatalf("%s: no Namespace %s", s.name, ns)
	return ""
}

// as converts a rendered object into a typed one.
func as[T any](t *testing.T, o map[string]any) *T {
	t.Helper()
	b, err := json.Marshal(o)
	require.NoError(t, err)
	var v T
	require.NoError(t, json.Unmarshal(b, &v))
	return &v
}

func find(objs []map[string]any, kind, name string) map[string]any {
	for _, o := range objs {
		if o["kind"] == kind && nameOf(o) == name {
			return o
		}
	}
	return nil
}

func nameOf(o map[string]any) string {
	m, _ := o["metadata"].(map[string]any)
	n, _ := m["name"].(string)
	return n
}

// podTemplates are the pod templates of the rendered workloads, by "Kind/name".
func podTemplates(t *testing.T, objs []map[string]any) map[string]corev1.PodTemplateSpec {
	t.Helper()
	out := map[string]corev1.PodTemplateSpec{}
	for _, o := range objs {
		switch o["kind"] {
		case "Deployment":
			out["Deployment/"+nameOf(o)] = as[appsv1.Deployment](t, o).Spec.Template
		case "StatefulSet":
			out["StatefulSet/"+nameOf(o)] = as[appsv1.StatefulSet](t, o).Spec.Template
		case "DaemonSet":
			out["DaemonSet/"+nameOf(o)] = as[appsv1.DaemonSet](t, o).Spec.Template
		case "Pod":
			p := as[corev1.Pod](t, o)
			out["Pod/"+nameOf(o)] = corev1.PodTemplateSpec{ObjectMeta: p.ObjectMeta, Spec: p.Spec}
		}
	}
	return out
}

// TestRealChartsRenderAsTheClusterNeeds renders each release of every
// committed stack from the upstream chart with the values the program gives
// it, and checks the rendered objects.
func TestRealChartsRenderAsTheClusterNeeds(t *testing.T) {
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks())
	require.NoError(t, err)
	for _, s := range committedStacks(t) {
		t.Run(s.name, func(t *testing.T) {
			for _, r := range render(t, s) {
				t.Run(r.release, func(t *testing.T) {
					// Every pod template is admitted by its namespace's
					// enforced level, by the evaluator the API server's
					// PodSecurity admission runs.
					templates := podTemplates(t, r.objects)
					require.NotEmpty(t, templates, "the chart renders no workload")
					for what, tmpl := range templates {
						results := evaluator.EvaluatePod(psaapi.LevelVersion{Level: r.level, Version: psaapi.LatestVersion()}, &tmpl.ObjectMeta, &tmpl.Spec)
						agg := policy.AggregateCheckResults(results)
						assert.True(t, agg.Allowed, "%s in namespace %s (%s): %s", what, r.namespace, r.level, agg.ForbiddenDetail())
					}
					// Every claim a StatefulSet makes names the storage class.
					for _, o := range r.objects {
						if o["kind"] != "StatefulSet" {
							continue
						}
						for _, c := range as[appsv1.StatefulSet](t, o).Spec.VolumeClaimTemplates {
							if assert.NotNil(t, c.Spec.StorageClassName, "StatefulSet/%s claim %s names no class", nameOf(o), c.Name) {
								assert.Equal(t, s.cfg.Storage.StorageClass, *c.Spec.StorageClassName, "StatefulSet/%s claim %s", nameOf(o), c.Name)
							}
						}
					}
					// Every value the program sets is one the chart has (a
					// typo would be ignored silently): its path is in the
					// chart's own defaults (subcharts' included), down to a
					// scalar, a list or an open map ({} by default).
					defaults, err := chartutil.CoalesceValues(r.chart, map[string]any{})
					require.NoError(t, err)
					for _, path := range unknownKeys(r.values, defaults, "") {
						if !readByTemplates(r.chart, path) {
							assert.Fail(t, "unknown chart value", "%s sets %s, which chart %s %s neither has nor reads", r.release, path, r.chart.Name(), r.chart.Metadata.Version)
						}
					}
					switch r.chart.Name() {
					case config.VaultChart:
						checkVault(t, s, r)
					case config.WoodpeckerChart:
						checkWoodpecker(t, s, r)
					case config.StorageChartName:
						checkStorage(t, s, r)
					}
				})
			}
		})
	}
}

// programSecret is the Secret the program creates in ns under name, with its
// keys.
func programSecret(t *testing.T, s stack, ns, name string) map[string]any {
	t.Helper()
	for _, sec := range s.rec.ByType(tSecret) {
		meta := plain(sec.Inputs["metadata"]).(map[string]any)
		if meta["name"] == name && meta["namespace"] == ns {
			data, _ := plain(sec.Inputs["stringData"]).(map[string]any)
			return data
		}
	}
	t.Fatalf("the program creates no Secret %s/%s", ns, name)
	return nil
}

func checkVault(t *testing.T, s stack, r rendered) {
	full := r.release
	if !strings.Contains(full, config.VaultChart) {
		full += "-" + config.VaultChart
	}
	sts := find(r.objects, "StatefulSet", full)
	require.NotNil(t, sts, "no StatefulSet %s", full)
	set := as[appsv1.StatefulSet](t, sts)
	// The listener's certificate files come from the program's TLS Secret.
	tlsName := helmapp.SecretName(r.release, stacks.VaultTLSSuffix)
	data := programSecret(t, s, r.namespace, tlsName)
	for _, k := range []string{"tls.crt", "tls.key", "ca.crt"} {
		assert.Contains(t, data, k, "Secret %s", tlsName)
	}
	var volume string
	for _, v := range set.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == tlsName {
			volume = v.Name
		}
	}
	require.NotEmpty(t, volume, "the Vault pods mount no volume of Secret %s", tlsName)
	var mounted string
	for _, c := range set.Spec.Template.Spec.Containers {
		if c.Name != "vault" {
			continue
		}
		for _, m := range c.VolumeMounts {
			if m.Name == volume {
				mounted = m.MountPath
			}
		}
	}
	require.Equal(t, stacks.VaultTLSDir, mounted, "the vault container mounts the TLS Secret at")
	cm := find(r.objects, "ConfigMap", full+"-config")
	require.NotNil(t, cm, "no ConfigMap %s-config", full)
	hcl := cm["data"].(map[string]any)["extraconfig-from-values.hcl"].(string)
	for _, f := range []string{"tls.crt", "tls.key"} {
		assert.Contains(t, hcl, fmt.Sprintf(`"%s/%s"`, mounted, f), "the listener reads %s from the mounted Secret", f)
	}
	assert.Contains(t, hcl, fmt.Sprintf(`leader_ca_cert_file = "%s/ca.crt"`, mounted))
	// Raft peers: each retry_join names a pod of the StatefulSet through
	// the headless service the chart makes and the StatefulSet is governed by.
	svc := find(r.objects, "Service", set.Spec.ServiceName)
	require.NotNil(t, svc, "no Service %s (the StatefulSet's serviceName)", set.Spec.ServiceName)
	assert.Equal(t, "None", as[corev1.Service](t, svc).Spec.ClusterIP, "Service %s is not headless", set.Spec.ServiceName)
	joins := regexp.MustCompile(`leader_api_addr\s*=\s*"https://([^:"]+):8200"`).FindAllStringSubmatch(hcl, -1)
	require.Len(t, joins, int(*set.Spec.Replicas), "one retry_join per peer")
	for i, j := range joins {
		assert.Equal(t, fmt.Sprintf("%s-%d.%s", set.Name, i, set.Spec.ServiceName), j[1])
	}
	// An exposed Vault: the chart's UI Service is the LoadBalancer that
	// asks MetalLB for exactly the configured address, and no other
	// Service of the chart asks for it.
	if e := appOf(t, s, r.release).Expose; e != nil {
		ui := find(r.objects, "Service", full+"-ui")
		require.NotNil(t, ui, "no Service %s-ui", full)
		svc := as[corev1.Service](t, ui)
		assert.Equal(t, corev1.ServiceTypeLoadBalancer, svc.Spec.Type)
		assert.Equal(t, e.Addr.String(), svc.Annotations[stacks.LBAddressAnnotation])
		assert.Equal(t, []int32{8200}, []int32{svc.Spec.Ports[0].Port})
		for _, o := range r.objects {
			if o["kind"] == "Service" && nameOf(o) != full+"-ui" {
				other := as[corev1.Service](t, o)
				assert.NotEqual(t, corev1.ServiceTypeLoadBalancer, other.Spec.Type, "Service %s", other.Name)
				assert.Empty(t, other.Annotations[stacks.LBAddressAnnotation], "Service %s", other.Name)
			}
		}
	}
	// Never dev mode: the server runs the config file.
	args := strings.Join(set.Spec.Template.Spec.Containers[0].Args, " ")
	assert.Contains(t, args, "vault server -config=/tmp/storageconfig.hcl")
	assert.NotContains(t, args, "-dev")
}

func checkWoodpecker(t *testing.T, s stack, r rendered) {
	w := appOf(t, s, r.release).Woodpecker
	forge := "WOODPECKER_" + strings.ToUpper(string(w.Forge.Kind))
	serverSecret := helmapp.SecretName(r.release, stacks.WoodpeckerServerSecret)
	agentSecret := helmapp.SecretName(r.release, stacks.WoodpeckerAgentSecret)
	sd := programSecret(t, s, r.namespace, serverSecret)
	for _, k := range []string{"WOODPECKER_AGENT_SECRET", forge + "_CLIENT", forge + "_SECRET"} {
		assert.Contains(t, sd, k, "Secret %s", serverSecret)
	}
	ad := programSecret(t, s, r.namespace, agentSecret)
	assert.Equal(t, []string{"WOODPECKER_AGENT_SECRET"}, slices.Sorted(maps.Keys(ad)), "the agents' Secret holds the agent secret alone")

	var server, agent *appsv1.StatefulSet
	for _, o := range r.objects {
		if o["kind"] != "StatefulSet" {
			continue
		}
		set := as[appsv1.StatefulSet](t, o)
		switch set.Spec.Template.Labels["app.kubernetes.io/name"] {
		case "server":
			server = set
		case "agent":
			agent = set
		}
	}
	require.NotNil(t, server, "no server StatefulSet")
	require.NotNil(t, agent, "no agent StatefulSet")
	env := func(set *appsv1.StatefulSet) (map[string]string, []string) {
		vars, from := map[string]string{}, []string{}
		for _, c := range set.Spec.Template.Spec.Containers {
			for _, e := range c.Env {
				vars[e.Name] = e.Value
			}
			for _, f := range c.EnvFrom {
				if f.SecretRef != nil {
					from = append(from, f.SecretRef.Name)
				}
			}
		}
		return vars, from
	}
	sv, sfrom := env(server)
	assert.Contains(t, sfrom, serverSecret, "the server reads its Secret")
	assert.Equal(t, w.Host, sv["WOODPECKER_HOST"])
	assert.Equal(t, "true", sv[forge])
	assert.Equal(t, w.Forge.URL, sv[forge+"_URL"])
	av, afrom := env(agent)
	assert.Contains(t, afrom, agentSecret, "the agent reads its Secret")
	assert.NotContains(t, afrom, serverSecret, "the agent never sees the forge's credentials")
	// The agent dials the server's gRPC service.
	host, port, ok := strings.Cut(av["WOODPECKER_SERVER"], ":")
	require.True(t, ok, "WOODPECKER_SERVER %q", av["WOODPECKER_SERVER"])
	svc := find(r.objects, "Service", host)
	require.NotNil(t, svc, "the agent's WOODPECKER_SERVER %s is no rendered Service", av["WOODPECKER_SERVER"])
	service := as[corev1.Service](t, svc)
	var grpc bool
	for _, p := range service.Spec.Ports {
		grpc = grpc || fmt.Sprint(p.Port) == port && strings.Contains(p.Name, "grpc")
	}
	assert.True(t, grpc, "Service %s has no grpc port %s: %+v", host, port, service.Spec.Ports)
	assert.Equal(t, server.Spec.Template.Labels["app.kubernetes.io/name"], service.Spec.Selector["app.kubernetes.io/name"], "Service %s selects the server", host)
	for _, k := range []string{"WOODPECKER_AGENT_SECRET", forge + "_CLIENT", forge + "_SECRET"} {
		assert.NotContains(t, sv, k, "a secret is a plain env value of the server")
		assert.NotContains(t, av, k, "a secret is a plain env value of the agent")
	}
}

func appOf(t *testing.T, s stack, release string) config.AppConfig {
	for _, a := range s.cfg.Apps {
		if a.ReleaseName == release {
			return a
		}
	}
	t.Fatalf("no app of release %s", release)
	return config.AppConfig{}
}

func checkStorage(t *testing.T, s stack, r rendered) {
	cm := find(r.objects, "ConfigMap", "local-path-config")
	require.NotNil(t, cm, "no ConfigMap local-path-config")
	var conf struct {
		NodePathMap []struct {
			Node  string   `json:"node"`
			Paths []string `json:"paths"`
		} `json:"nodePathMap"`
	}
	require.NoError(t, json.Unmarshal([]byte(cm["data"].(map[string]any)["config.json"].(string)), &conf))
	require.NotEmpty(t, conf.NodePathMap)
	mounts := bindMounts(t, s)
	require.NotEmpty(t, mounts, "no Talos patch bind-mounts a directory into the kubelet")
	for _, n := range conf.NodePathMap {
		for _, p := range n.Paths {
			inside := slices.ContainsFunc(mounts, func(m string) bool { return p == m || strings.HasPrefix(p, m+"/") })
			assert.True(t, inside, "node path %s is outside the kubelet's bind mounts %v", p, mounts)
		}
	}
	// The provisioner registers the class's provisioner name.
	var args []string
	for _, o := range r.objects {
		if o["kind"] == "Deployment" {
			for _, c := range as[appsv1.Deployment](t, o).Spec.Template.Spec.Containers {
				args = append(args, c.Command...)
				args = append(args, c.Args...)
			}
		}
	}
	assert.Contains(t, strings.Join(args, " "), "--provisioner-name "+stacks.LocalPathProvisioner)
}

// bindMounts are the destinations of the kubelet bind mounts the program's
// Talos patches set (machine.kubelet.extraMounts), found in every string
// input of every resource.
func bindMounts(t *testing.T, s stack) []string {
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for _, e := range v {
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		case string:
			if !strings.Contains(v, "extraMounts") {
				return
			}
			var patch struct {
				Machine struct {
					Kubelet struct {
						ExtraMounts []struct {
							Destination string   `json:"destination"`
							Type        string   `json:"type"`
							Options     []string `json:"options"`
						} `json:"extraMounts"`
					} `json:"kubelet"`
				} `json:"machine"`
			}
			if yaml.Unmarshal([]byte(v), &patch) != nil {
				return
			}
			for _, m := range patch.Machine.Kubelet.ExtraMounts {
				if m.Type == "bind" && slices.Contains(m.Options, "rw") && !slices.Contains(out, m.Destination) {
					out = append(out, m.Destination)
				}
			}
		}
	}
	for _, r := range s.rec.Registrations() {
		walk(plain(resource.NewObjectProperty(r.Inputs)))
	}
	if s.cfg.StartAt == config.LayerApps {
		// An existing cluster: no Talos layer; the storage path is the
		// operator's to mount.
		return []string{s.cfg.Storage.Path}
	}
	return out
}

// TestVaultSchemaRejectsAWrongType: the engine really validates against
// the chart's values.schema.json (a guard for the render test above).
func TestVaultSchemaRejectsAWrongType(t *testing.T) {
	ch, err := loader.Load(filepath.Join(chartsDir(t), "vault-0.29.1.tgz"))
	require.NoError(t, err)
	_, err = renderChart(ch, "vault", "vault", "v1.32.3", map[string]any{"server": map[string]any{"terminationGracePeriodSeconds": "ten"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "terminationGracePeriodSeconds")
}

// openMap reports whether a default map takes any key: an empty one (e.g.
// extraEnvironmentVars: {}), or one of environment variables (e.g.
// Woodpecker's server.env).
func openMap(m map[string]any) bool {
	for k := range m {
		if !envName.MatchString(k) {
			return false
		}
	}
	return true
}

var envName = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)

// unknownKeys returns the paths of values that defaults has no place for.
func unknownKeys(values, defaults map[string]any, prefix string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(values)) {
		path := prefix + k
		d, ok := defaults[k]
		if !ok {
			if !openMap(defaults) {
				out = append(out, path)
			}
			continue
		}
		vm, vok := values[k].(map[string]any)
		dm, dok := d.(map[string]any)
		if vok && dok {
			out = append(out, unknownKeys(vm, dm, path+".")...)
		}
	}
	return out
}

// readByTemplates reports whether a template of the chart (or, for a path
// under a subchart's name, of that subchart) reads .Values.<path>: a key
// the chart documents only as a comment in values.yaml (e.g.
// local-path-provisioner's storageClass.provisionerName).
func readByTemplates(ch *chart.Chart, path string) bool {
	for _, tpl := range ch.Templates {
		if strings.Contains(string(tpl.Data), ".Values."+path) {
			return true
		}
	}
	sub, rest, ok := strings.Cut(path, ".")
	if !ok {
		return false
	}
	for _, d := range ch.Dependencies() {
		if d.Name() == sub && readByTemplates(d, rest) {
			return true
		}
	}
	return false
}
