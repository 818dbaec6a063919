//go:build integration

package integration

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// A refreshed preview reads every resource once and diffs it once: the
// preview's own Diff of the refreshed state, not also the Diff the engine
// would run after each refresh Read (engine: UseLegacyRefreshDiff on a
// refreshed preview). Drift made outside Pulumi still shows, through the
// preview's Diff, and only in the refreshed preview. The provider RPCs are
// counted from the engine's own gRPC debug log (PULUMI_DEBUG_GRPC).
func TestRefreshedPreviewReadsOnceDiffsOnce(t *testing.T) {
	s := newScenario(t, "refresh", 41)
	s.up()
	res, err := s.stack.Resources(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var custom []string // URNs of the libvirt resources (not the provider)
	for _, r := range res {
		if strings.HasPrefix(r.Type, "libvirt:index/") {
			custom = append(custom, string(r.URN))
		}
	}
	slices.Sort(custom)

	calls := func(refresh bool) map[string][]string {
		t.Helper()
		log := filepath.Join(t.TempDir(), "grpc.jsonl")
		t.Setenv("PULUMI_DEBUG_GRPC", log)
		s.requireNoChanges("preview refresh="+strconv.FormatBool(refresh), s.preview(refresh))
		return providerCalls(t, log)
	}
	got := calls(true)
	t.Logf("preview --refresh: %d Read, %d Diff, %d Check, %d Configure, %d GetPluginInfo for %d libvirt resources",
		len(got["Read"]), len(got["Diff"]), len(got["Check"]), len(got["Configure"]), len(got["GetPluginInfo"]), len(custom))
	for _, m := range []string{"Read", "Diff"} {
		urns := slices.Sorted(slices.Values(got[m]))
		if !slices.Equal(urns, custom) {
			t.Errorf("preview --refresh: %s for %v, want once for each of %v", m, urns, custom)
		}
	}
	if plain := calls(false); len(plain["Read"]) != 0 || len(plain["Diff"]) != len(custom) {
		t.Errorf("preview: %d Read, %d Diff; want 0 and %d", len(plain["Read"]), len(plain["Diff"]), len(custom))
	}

	// Drift outside Pulumi: the refreshed preview shows it (a replace, as
	// any domain change), the plain preview, on state, does not.
	dom := s.domain(s.nodes[1].Name)
	virsh(t, "autostart", "--disable", dom)
	s.requireNoChanges("preview after drift, no refresh", s.preview(false))
	r := s.preview(true)
	var drift []string
	seen := false
	for _, st := range r.Changes() {
		drift = append(drift, string(st.Op)+" "+st.Name()+" "+strings.Join(st.Diffs, ","))
		if st.Name() != dom {
			t.Errorf("preview --refresh after drift: unexpected change %s %s %v", st.Op, st.Name(), st.Diffs)
		}
		seen = seen || slices.Contains(st.Diffs, "autostart")
	}
	if !seen {
		t.Errorf("preview --refresh after disabling %s's autostart: want a change of its autostart, got %v", dom, drift)
	}
	t.Logf("preview --refresh after drift: %v", drift)
}

// providerCalls reads a PULUMI_DEBUG_GRPC log: for every ResourceProvider
// method, the URN of each call ("" for methods without one).
func providerCalls(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	out := map[string][]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e struct {
			Method  string `json:"method"`
			Request struct {
				URN string `json:"urn"`
			} `json:"request"`
			Response json.RawMessage `json:"response"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		// The log has an entry for each request and one for its response.
		if m, ok := strings.CutPrefix(e.Method, "/pulumirpc.ResourceProvider/"); ok && e.Response == nil {
			out[m] = append(out[m], e.Request.URN)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
