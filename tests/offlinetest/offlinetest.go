// Package offlinetest holds the test helpers around an offline run of the
// program: stack files read into raw config, config objects edited and
// turned into raw config, and recorded registrations shaped as a preview's
// steps.
package offlinetest

import (
	"encoding/json"
	"fmt"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"

	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/internal/offline"
	"github.com/milner/milner/internal/stackfile"
	"github.com/milner/milner/stacks/config"
)

// ReadStackConfig reads the plain config of a Pulumi.<stack>.yaml into raw
// config values as the engine passes them to a program (stackfile.Read),
// its secrets left out for the test to set.
func ReadStackConfig(path string) (map[string]string, error) {
	s, err := stackfile.Read(path, nil)
	if err != nil {
		return nil, err
	}
	for _, k := range s.SecretKeys {
		delete(s.Raw, k)
	}
	return s.Raw, nil
}

// RawConfig turns config objects, keyed as in a stack file's config block
// without the project namespace, into the raw values the engine passes a
// program (as ReadStackConfig does for a file).
func RawConfig(c map[string]any) (map[string]string, error) {
	out := make(map[string]string, len(c))
	for k, v := range c {
		// A string as it is, anything else as JSON.
		raw, isString := v.(string)
		if !isString {
			b, err := json.Marshal(v)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			raw = string(b)
		}
		out[config.Key(k)] = raw
	}
	return out, nil
}

// At walks a path of map keys and list indexes into a config object and
// returns the object there, for tests that edit one value of a config.
func At(c map[string]any, path ...any) map[string]any {
	var cur any = c
	for _, p := range path {
		switch p := p.(type) {
		case string:
			cur = cur.(map[string]any)[p]
		case int:
			cur = cur.([]any)[p]
		}
	}
	return cur.(map[string]any)
}

// Steps returns the custom resources r recorded as the steps a preview of
// a clean install reports: a create (an import where the program imports)
// with its inputs, as the engine's events carry them. Tests hand them to
// what judges a real preview's steps.
func Steps(r *offline.Recorder) []gate.Step {
	var out []gate.Step
	for _, reg := range r.Registrations() {
		if !reg.Custom {
			continue
		}
		s := gate.Step{Op: apitype.OpCreate, URN: reg.URN, Type: reg.Type, Inputs: reg.Inputs.Mappable()}
		if reg.Options.ImportID != "" {
			s.Op, s.ID = apitype.OpImport, reg.Options.ImportID
		}
		out = append(out, s)
	}
	return out
}

// Counts returns the number of registrations per type token.
func Counts(r *offline.Recorder) map[string]int {
	counts := map[string]int{}
	for _, reg := range r.Registrations() {
		counts[reg.Type]++
	}
	return counts
}

// InvokesOf returns the invokes of one token, in call order.
func InvokesOf(r *offline.Recorder, token string) []offline.Invoke {
	var out []offline.Invoke
	for _, inv := range r.Invokes() {
		if inv.Token == token {
			out = append(out, inv)
		}
	}
	return out
}
