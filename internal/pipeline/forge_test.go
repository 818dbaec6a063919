package pipeline

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/stacks/config"
)

// forgeOp is a run on a stack whose apps[1] is Woodpecker with forge url
// (no forge when url is "").
func forgeOp(url string) *Op {
	w := &config.WoodpeckerConfig{Host: "https://ci.example.org"}
	if url != "" {
		w.Forge = &config.ForgeConfig{Kind: config.ForgeGitea, URL: url}
	}
	return &Op{Ctx: context.Background(), cfg: &config.Config{StartAt: config.LayerSubstrate, StopAfter: config.LayerApps, Apps: []config.AppConfig{
		{Name: "vault", Chart: config.ChartConfig{Name: config.VaultChart}},
		{Name: "woodpecker", Chart: config.ChartConfig{Name: config.WoodpeckerChart}, Woodpecker: w},
	}}}
}

func TestForgeMustAnswerAtPreview(t *testing.T) {
	forge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/down" {
			http.Error(w, "bad gateway", http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer forge.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deadURL := "http://" + closed.Addr().String()
	require.NoError(t, closed.Close())

	_, err = forgeAnswers(forgeOp(forge.URL))
	require.NoError(t, err, "a forge that answers")
	_, err = forgeAnswers(forgeOp(""))
	require.NoError(t, err, "no forge: Woodpecker is off, nothing is asked")
	talosOnly := forgeOp(deadURL)
	talosOnly.cfg.StopAfter = config.LayerTalos
	_, err = forgeAnswers(talosOnly)
	require.NoError(t, err, "a stack stopping before the apps deploys no Woodpecker: nothing is asked")

	for url, reason := range map[string]string{
		deadURL:             "connection refused",
		forge.URL + "/down": "HTTP 502 Bad Gateway",
	} {
		_, err := forgeAnswers(forgeOp(url))
		var ref *Refusal
		require.True(t, errors.As(err, &ref), "%s: want a refusal, got %v", url, err)
		assert.Contains(t, ref.Msg, "milner:apps[1].woodpecker.forge.url: the forge "+url+" does not answer")
		assert.Contains(t, ref.Msg, reason)
	}
	assert.Contains(t, rulesOf(previewRules), "forge-answers")
	assert.Contains(t, rulesOf(upRules), "forge-answers")
}

func rulesOf(rules []Rule) []string {
	var out []string
	for _, r := range rules {
		out = append(out, r.Name)
	}
	return out
}
