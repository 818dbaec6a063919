package engine

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
)

// OutputsInClear returns the outputs of the one resource of type typ in the
// stack's state, secrets decrypted (`pulumi stack export --show-secrets`,
// read into memory only), and the resource's logical name. It is what
// `milner secrets export` reads the cluster's secrets bundle with.
func (s *Stack) OutputsInClear(ctx context.Context, typ string) (string, map[string]any, error) {
	out, stderr, _, err := s.cli(ctx, "stack", "export", "--show-secrets", "--stack", s.Name())
	if err != nil {
		return "", nil, fmt.Errorf("stack %q: export: %w: %s", s.Name(), err, stderr)
	}
	var dep apitype.UntypedDeployment
	if err := json.Unmarshal([]byte(out), &dep); err != nil {
		return "", nil, fmt.Errorf("stack %q: decode export: %w", s.Name(), err)
	}
	var state apitype.DeploymentV3
	if err := json.Unmarshal(dep.Deployment, &state); err != nil {
		return "", nil, fmt.Errorf("stack %q: decode state: %w", s.Name(), err)
	}
	for _, r := range state.Resources {
		if string(r.Type) != typ || r.Delete {
			continue
		}
		outs, err := revealSecrets(r.Outputs)
		if err != nil {
			return "", nil, fmt.Errorf("stack %q: %s: %w", s.Name(), r.URN, err)
		}
		return r.URN.Name(), outs.(map[string]any), nil
	}
	return "", nil, fmt.Errorf("stack %q: the state holds no %s", s.Name(), typ)
}

// revealSecrets replaces every secret envelope of an exported state value
// ({"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270",
// "plaintext": "<JSON>"}, as `--show-secrets` writes it) by its value.
func revealSecrets(v any) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		if x[resource.SigKey] == resource.SecretSig {
			plain, _ := x["plaintext"].(string)
			var inner any
			if err := json.Unmarshal([]byte(plain), &inner); err != nil {
				return nil, fmt.Errorf("secret value: %w", err)
			}
			return revealSecrets(inner)
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			r, err := revealSecrets(e)
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			r, err := revealSecrets(e)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	default:
		return v, nil
	}
}

// Import adopts an existing resource into the stack's state under the
// program's logical name (`pulumi import --protect`), without generating
// code: the program already declares it. For the Talos secrets bundle the
// id is the path of the bundle file (terraform-provider-talos ImportState).
func (s *Stack) Import(ctx context.Context, typ, name, id string) error {
	_, stderr, _, err := s.cli(ctx, "import", typ, name, id, "--yes", "--protect", "--generate-code=false", "--stack", s.Name())
	if err != nil {
		return fmt.Errorf("stack %q: import %s %s: %w: %s", s.Name(), typ, name, err, stderr)
	}
	return nil
}
