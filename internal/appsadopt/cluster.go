package appsadopt

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/milner/milner/internal/gate"
)

// Cluster is what Decide asks the cluster: the evidence.
type Cluster interface {
	// Exists reports whether the object is live under its name (and
	// namespace).
	Exists(ctx context.Context, o Object) (bool, error)
	// Release is the latest revision of the Helm release name in
	// namespace, nil when Helm records none there.
	Release(ctx context.Context, namespace, name string) (*Release, error)
}

// Release is a Helm release's latest revision as Helm records it.
type Release struct {
	// Chart and Version are its chart's Chart.yaml name and version.
	Chart, Version string
	// Revision is the revision number; Status its status (deployed, failed, ...).
	Revision int
	Status   string
}

// Plan is what Decide adopts.
type Plan struct {
	// Objects are the adopted objects, in the preview's order.
	Objects []Object
	// Releases are the live releases the adopted releases are, by URN.
	Releases map[string]*Release
}

// Adopt is the plan as stacks.RunOptions.Adopt takes it: logical name →
// import id.
func (p *Plan) Adopt() map[string]string {
	out := map[string]string{}
	for _, o := range p.Objects {
		out[o.Logical()] = o.ImportID()
	}
	return out
}

// Decide asks the cluster for each declared object: one it holds is
// adopted, one it lacks is left for the next up to create. A release Helm
// records under the declared name and namespace from another chart is
// refused, naming both charts; every refusal is returned at once.
func Decide(ctx context.Context, declared []Object, c Cluster) (*Plan, []gate.Refusal, error) {
	p := &Plan{Releases: map[string]*Release{}}
	var refusals []gate.Refusal
	for _, o := range declared {
		if o.Type != TypeRelease {
			live, err := c.Exists(ctx, o)
			if err != nil {
				return nil, nil, fmt.Errorf("ask the cluster for %s: %w", o, err)
			}
			if live {
				p.Objects = append(p.Objects, o)
			}
			continue
		}
		r, err := c.Release(ctx, o.Namespace, o.Name)
		switch {
		case err != nil:
			return nil, nil, fmt.Errorf("ask the cluster for %s: %w", o, err)
		case r == nil:
			continue
		case r.Chart != o.Chart:
			refusals = append(refusals, gate.Refusal{
				Resource: o.Logical(),
				Reason: fmt.Sprintf("Helm release %s is chart %s %s (revision %d) in the cluster, the stack declares chart %s: another chart's release is never adopted",
					o.ImportID(), r.Chart, r.Version, r.Revision, o.Chart),
				Instead: fmt.Sprintf("give the app another releaseName, or remove release %s from namespace %s (helm uninstall) if it is not wanted", o.Name, o.Namespace),
			})
			continue
		}
		p.Objects = append(p.Objects, o)
		p.Releases[o.URN] = r
	}
	return p, refusals, nil
}

// kubeCluster is the Cluster of a kubeconfig, through client-go.
type kubeCluster struct{ client kubernetes.Interface }

// NewCluster is the Cluster kubeconfig reaches (the stack's own: for a
// stack that starts at the apps layer, its secret milner:kubeconfig).
func NewCluster(kubeconfig []byte) (Cluster, error) {
	rc, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return &kubeCluster{client: client}, nil
}

// Exists gets the object by name.
func (k *kubeCluster) Exists(ctx context.Context, o Object) (bool, error) {
	var err error
	get := metav1.GetOptions{}
	switch o.Type {
	case TypeNamespace:
		_, err = k.client.CoreV1().Namespaces().Get(ctx, o.Name, get)
	case TypeSecret:
		_, err = k.client.CoreV1().Secrets(o.Namespace).Get(ctx, o.Name, get)
	case TypeResourceQuota:
		_, err = k.client.CoreV1().ResourceQuotas(o.Namespace).Get(ctx, o.Name, get)
	case TypeLimitRange:
		_, err = k.client.CoreV1().LimitRanges(o.Namespace).Get(ctx, o.Name, get)
	case TypePriorityClass:
		_, err = k.client.SchedulingV1().PriorityClasses().Get(ctx, o.Name, get)
	case TypeStorageClass:
		_, err = k.client.StorageV1().StorageClasses().Get(ctx, o.Name, get)
	case TypeClusterRoleBinding:
		_, err = k.client.RbacV1().ClusterRoleBindings().Get(ctx, o.Name, get)
	default:
		return false, fmt.Errorf("no adoption of type %s", o.Type)
	}
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// Release reads the release's storage: one Secret per revision, labelled
// owner=helm, name=<release>, version=<revision> (helm.sh/helm/v3
// pkg/storage/driver/secrets.go; the provider's Helm uses the secret
// driver unless HELM_DRIVER says otherwise), its "release" key the
// base64 of the gzipped JSON release (driver/util.go encodeRelease).
func (k *kubeCluster) Release(ctx context.Context, namespace, name string) (*Release, error) {
	list, err := k.client.CoreV1().Secrets(namespace).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=" + name})
	if err != nil {
		return nil, err
	}
	var latest []byte
	rev := 0
	for _, s := range list.Items {
		v, err := strconv.Atoi(s.Labels["version"])
		if err != nil {
			return nil, fmt.Errorf("helm storage secret %s/%s: version label %q", namespace, s.Name, s.Labels["version"])
		}
		if v > rev {
			rev, latest = v, s.Data["release"]
		}
	}
	if rev == 0 {
		return nil, nil
	}
	r, err := decodeRelease(latest)
	if err != nil {
		return nil, fmt.Errorf("helm release %s/%s revision %d: %w", namespace, name, rev, err)
	}
	return r, nil
}

// decodeRelease decodes a Helm storage record (driver/util.go
// decodeRelease: base64, then gzip when it starts with gzip's magic).
func decodeRelease(data []byte) (*Release, error) {
	b, err := base64.StdEncoding.DecodeString(string(data))
	if err != nil {
		return nil, fmt.Errorf("not base64: %w", err)
	}
	if len(b) > 3 && bytes.Equal(b[:3], []byte{0x1f, 0x8b, 0x08}) {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, err
		}
		if b, err = io.ReadAll(zr); err != nil {
			return nil, err
		}
	}
	var rec struct {
		Version int `json:"version"`
		Info    struct {
			Status string `json:"status"`
		} `json:"info"`
		Chart struct {
			Metadata struct {
				Name    string `json:"name"`
				Version string `json:"version"`
			} `json:"metadata"`
		} `json:"chart"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("not a release: %w", err)
	}
	return &Release{Chart: rec.Chart.Metadata.Name, Version: rec.Chart.Metadata.Version, Revision: rec.Version, Status: rec.Info.Status}, nil
}
