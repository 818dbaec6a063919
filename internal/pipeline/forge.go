package pipeline

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/milner/milner/internal/gate"
	"github.com/milner/milner/stacks/config"
)

// forgeTimeout bounds the forge's answer: a forge that takes longer to
// answer one GET will not serve Woodpecker's OAuth login either.
const forgeTimeout = 10 * time.Second

// forgeAnswers refuses a preview (and so an up) whose Woodpecker names a
// forge that does not answer: Woodpecker would install, start and fail at
// the first login. The forge is the user's (Milner runs none), so it is
// asked, once, what any HTTP client would: a GET of its URL, with the
// system's roots for TLS. Any HTTP answer below 500 is an answer; a
// refused connection, an unknown name, a bad certificate, a timeout or a
// server error is not. A stack without a forge has Woodpecker off and asks
// nothing.
func forgeAnswers(o *Op) ([]gate.Refusal, error) {
	cfg, err := o.Config()
	if err != nil || !cfg.Declares(config.LayerApps) {
		return nil, err // a stack stopping before the apps deploys no Woodpecker
	}
	for i, a := range cfg.Apps {
		if a.Woodpecker == nil || a.WoodpeckerOff() {
			continue
		}
		url := a.Woodpecker.Forge.URL
		if reason := askForge(o.Ctx, url); reason != "" {
			return nil, Refused("%s[%d].woodpecker.forge.url: the forge %s does not answer (%s); Woodpecker would start and fail to log anyone in. Start the forge or correct the URL; or remove woodpecker.forge to turn Woodpecker off; nothing was changed",
				config.Key("apps"), i, url, reason)
		}
	}
	return nil, nil
}

// askForge GETs url and returns why it is no answer ("" when it is one).
func askForge(ctx context.Context, url string) string {
	ctx, cancel := context.WithTimeout(ctx, forgeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		// The URL is the user's own config; the error names it once.
		return strings.TrimPrefix(err.Error(), fmt.Sprintf("Get %q: ", url))
	}
	_ = resp.Body.Close()
	if resp.StatusCode >= 500 {
		return "HTTP " + resp.Status
	}
	return ""
}
