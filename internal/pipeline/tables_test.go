package pipeline

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/milner/milner/internal/engine"
)

// ruleName is a rule's name where the package's code writes it outside a
// table: named(…, "<rule>"), a Refusal's Rule: "<rule>", or judgeWithin("<rule>").
var ruleName = regexp.MustCompile(`(?:named\(.*, |Rule: |judgeWithin\()"([a-z0-9-]+)"`)

// TestEveryRefusalsRuleIsInATable: every rule name the package's code
// gives a refusal is a rule of some verb's table, so `milner preview
// --explain` maps each refusal's [rule <name>] to the file and function
// holding it; each table's names are unique, and each rule's place is a
// function in a file of this package.
func TestEveryRefusalsRuleIsInATable(t *testing.T) {
	tabled := map[string]bool{}
	for _, v := range Tables() {
		seen := map[string]bool{}
		for _, r := range v.Rules {
			assert.False(t, seen[r.Name], "milner %s: rule %s listed twice", v.Name, r.Name)
			seen[r.Name], tabled[r.Name] = true, true
			file, fn, ok := strings.Cut(r.Where(), ":")
			require.True(t, ok, r.Where())
			assert.True(t, strings.HasPrefix(file, "internal/pipeline/"), "%s: %s", r.Name, file)
			src, err := os.ReadFile(filepath.Base(file))
			require.NoError(t, err, "%s: %s", r.Name, file)
			assert.Regexp(t, `func (\(o \*Op\) )?`+regexp.QuoteMeta(fn)+`\(`, string(src), "%s: no func %s in %s", r.Name, fn, file)
		}
	}
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	named := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range ruleName.FindAllStringSubmatch(string(src), -1) {
			named++
			assert.True(t, tabled[m[1]], "%s names the rule %q, which no verb's table lists", f, m[1])
		}
	}
	assert.NotZero(t, named, "the scan finds the names written outside the tables")
}

// TestWithinRulesNameTheirRefusal: a rule judged inside a verb's stage
// refuses under its table's name, and Explain lists it with its file.
func TestWithinRulesNameTheirRefusal(t *testing.T) {
	o := &Op{rules: Upgrade().Rules}
	require.NoError(t, o.judgeWithin("upgrade-health-gate"), "an upgrade that did not stop refuses nothing")
	require.Error(t, o.judgeWithin("adopt-apps-same-chart"), "another verb's rule")
	o.upgrade.stopped = errors.New("cp-1: health gate: etcd is not healthy")
	err := o.judgeWithin("upgrade-health-gate")
	var ref *Refusal
	require.ErrorAs(t, err, &ref)
	assert.Equal(t, "refused: cp-1: health gate: etcd is not healthy [rule upgrade-health-gate]", err.Error())

	var out bytes.Buffer
	Explain(&out)
	assert.Regexp(t, `adopt-apps-same-chart\s+inside the verb's stage\s+internal/pipeline/adopt.go:adoptAppsSameChart`, out.String())
	assert.Regexp(t, `upgrade-health-gate\s+inside the verb's stage\s+internal/pipeline/upgrade.go:upgradeHealthGate`, out.String())
}

// TestPolicyPackViolationsAreRefusals: each violation the engine's run of
// the policy pack reported is a refusal naming its policy and resource.
func TestPolicyPackViolationsAreRefusals(t *testing.T) {
	o := &Op{plan: &planned{res: &engine.Result{Violations: []engine.Violation{{
		Policy: "milner-protected", URN: "urn:pulumi:dev::milner::talos:machine/secrets:Secrets::stray",
		Message: "persistent substrate and the cluster's secrets bundle are protected\nstray (talos:machine/secrets:Secrets) is not protected",
	}}}}}
	got, err := policyPack(o)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, "stray", got[0].Resource)
	assert.Equal(t, "policy milner-protected: stray (talos:machine/secrets:Secrets) is not protected", got[0].Reason)
}
