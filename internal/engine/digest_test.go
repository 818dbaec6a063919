package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/pulumi/pulumi/pkg/v3/display"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// TestDigestIsPulumisPreviewDigest: a preview's Digest decodes as Pulumi's
// own display.PreviewDigest, with the steps of its plan (a component to
// create, the stack to create) and its change summary; after the up, the
// next preview's digest holds no step but the stack's (same steps are not
// shown, as `pulumi preview --json`; the stack's always is).
func TestDigestIsPulumisPreviewDigest(t *testing.T) {
	dir := displayProject(t, "s", "config: {}\n")
	ctx := context.Background()
	st, err := Open(ctx, Options{Stack: "s", Dir: dir, Backend: "file://" + filepath.Join(dir, "state"),
		Passphrase: "correct horse battery staple 42", Progress: &bytes.Buffer{},
		Program: func(ctx *pulumi.Context) error {
			var c struct{ pulumi.ResourceState }
			if err := ctx.RegisterComponentResource("milner:test:Thing", "thing", &c); err != nil {
				return err
			}
			return ctx.RegisterResourceOutputs(&c, pulumi.Map{})
		}})
	if err != nil {
		t.Fatal(err)
	}
	decode := func() display.PreviewDigest {
		t.Helper()
		r, _, err := st.Preview(ctx, PlanOptions{})
		if err != nil {
			t.Fatal(err)
		}
		raw, err := r.Digest()
		if err != nil {
			t.Fatal(err)
		}
		var d display.PreviewDigest
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatalf("not a PreviewDigest: %v\n%s", err, raw)
		}
		return d
	}
	d := decode()
	ops := map[string]string{}
	for _, s := range d.Steps {
		ops[s.URN.Name()] = string(s.Op)
	}
	if ops["thing"] != "create" || ops["displaytest-s"] != "create" || d.ChangeSummary["create"] != 2 {
		t.Errorf("digest of the first preview: steps %v, summary %v; want the component and the stack created", ops, d.ChangeSummary)
	}
	if _, err := st.Up(ctx); err != nil {
		t.Fatal(err)
	}
	d = decode()
	if len(d.Steps) != 1 || d.Steps[0].URN.Name() != "displaytest-s" || d.Steps[0].Op != "same" || d.ChangeSummary["same"] != 2 {
		t.Errorf("digest after the up: steps %+v, summary %v; want only the stack's (always shown), 2 same", d.Steps, d.ChangeSummary)
	}
	// An operation that is no preview has no digest; its JSON is its
	// engine events, as `pulumi refresh --json` streams them.
	r, err := st.Refresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Digest(); !errors.Is(err, ErrNoDigest) {
		t.Errorf("a refresh's digest: %v, want ErrNoDigest", err)
	}
	raw, err := r.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var evs []apitype.EngineEvent
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields() // Pulumi's events alone
	if err := dec.Decode(&evs); err != nil || len(evs) == 0 || evs[0].PreludeEvent == nil || !slices.ContainsFunc(evs, func(e apitype.EngineEvent) bool { return e.SummaryEvent != nil }) {
		t.Errorf("a refresh's JSON: %v, %.300s; want its engine events, a prelude first and a summary", err, raw)
	}
}
