package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/pulumi/pulumi/pkg/v3/backend/display"
	pkgengine "github.com/pulumi/pulumi/pkg/v3/engine"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
)

// ErrNoDigest is Digest's error for an operation that was not a preview.
var ErrNoDigest = errors.New("no preview digest: the operation was not a preview")

// JSON is what `pulumi <operation> --json` prints for the operation, as
// one JSON value: for a preview its Digest; for an update, refresh or
// destroy, which Pulumi's CLI streams as engine events instead
// (backend/display/display.go ShowEvents: ShowPreviewDigest only for a
// preview, else ShowJSONEvents, one apitype.EngineEvent a line), the
// array of those events: the lines of the operation's event log, which
// the same logJSONEvent writes.
func (r *Result) JSON() (json.RawMessage, error) {
	if r.raw != nil {
		return r.Digest()
	}
	evs := make([]apitype.EngineEvent, 0, len(r.Events))
	for _, ev := range r.Events { // without the automation API's Error field
		evs = append(evs, ev.EngineEvent)
	}
	return json.Marshal(evs)
}

// Digest is the preview's steps as Pulumi's own JSON document: the one
// `pulumi preview --json` prints (display.PreviewDigest: config, steps
// with old and new state and detailed diff, diagnostics, changeSummary,
// duration; secrets as "[secret]"). It is built, unchanged, by Pulumi's
// own printer, display.ShowPreviewDigest (pkg/v3 v3.276.0
// backend/display/json.go), fed the engine events of the preview as the
// engine sent them (the events channel of backend.PreviewStack) and given
// `pulumi preview --json`'s default options (cmd/pulumi/operations/
// preview.go: JSONDisplay, no same, replacement or read steps shown).
// milner's own display shows the progress meanwhile, so the digest is
// built after the preview rather than instead of its progress. The
// event log cannot serve: display.ConvertJSONEvent leaves each step's
// State nil, on which ShowPreviewDigest panics (json.go
// getPreviewMetadataStep), so a refresh or destroy, whose backend calls
// take no events channel, has no digest (ErrNoDigest).
func (r *Result) Digest() (json.RawMessage, error) {
	if r.raw == nil {
		return nil, ErrNoDigest
	}
	// ShowPreviewDigest prints the document on os.Stdout (json.go:
	// fmt.Println): a file stands in for it meanwhile.
	tmp, err := os.CreateTemp("", "milner-digest-*.json")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	defer func() { _ = tmp.Close() }()
	evs, done := make(chan pkgengine.Event), make(chan bool)
	go func() {
		defer close(evs)
		for _, e := range r.raw {
			if !e.Internal() { // as display.ShowEvents filters them
				evs <- e
			}
		}
	}()
	stdout := os.Stdout
	os.Stdout = tmp
	display.ShowPreviewDigest(evs, done, display.Options{JSONDisplay: true})
	os.Stdout = stdout
	<-done
	for range evs { // what follows a cancellation, which ends the digest
	}
	b, err := os.ReadFile(tmp.Name())
	if err != nil {
		return nil, err
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("preview digest: not JSON: %.200s", b)
	}
	return json.RawMessage(b), nil
}
