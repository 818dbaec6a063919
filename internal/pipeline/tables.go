package pipeline

import "slices"

// The verbs' tables: each gated verb's rules, in the order they judge.
// Adding a rule is one line here, its function and its test.

// previewRules are what a preview judges: exactly what up prints before
// asking, but for up's own flags (--replace's Talos side, --os-disk, the
// contract).
var previewRules = []Rule{
	{"remove-named", Before, removeNamed},
	{"remove-node", Before, removeNode},
	{"proxmox-privileges", Before, proxmoxPrivileges},
	{"proxmox-known-hosts", Before, proxmoxKnownHosts},
	{"libvirt-kvm", Before, libvirtKVM},
	{"remote-node-network", Before, remoteNodeNetwork},
	{"charts-published", Before, chartsPublished},
	{"replace-in-state", Before, replaceInState},
	{"forge-answers", Before, forgeAnswers},
	{"substrate-in-state", Stop, substrateInState},
	{"state-identity", Stop, stateIdentity},
	{"layer-rules", Report, layerRules},
	{"proxmox-disk-shrink", Report, proxmoxDiskShrink},
	{"one-secrets-bundle", Report, oneSecretsBundle},
	{"one-bootstrap", Report, oneBootstrap},
	{"one-new-node", Report, oneNewNode},
	{"boot-image", Stop, bootImage},
	{"versions-interlock", Report, versionsInterlock},
	{"policy-pack", Report, policyPack},
}

// upRules are up's (with --replace and --os-disk): the preview's, after
// the replace's and the contract's, and the apps' readiness last.
var upRules = slices.Concat([]Rule{
	{"replace-one-node", Before, replaceOneNode},
	{"os-disk-libvirt", Before, osDiskLibvirt},
	{"replace-talos-api", Before, replaceTalosAPI},
	{"os-disk-etcd-quorum", Before, osDiskQuorum},
	{"os-disk-volume", Before, osDiskVolume},
	{"config-contract", Before, configContract},
}, previewRules, []Rule{
	{"replace-apps-ready", Last, replaceAppsReady},
})

// Preview is `milner preview`: the stages up to the report.
func Preview() Verb {
	return Verb{Name: "preview", Rules: previewRules, plan: (*Op).planPreview, report: outcome}
}

// Up is `milner up` (with --replace, --os-disk): every stage, the apply
// of exactly the reviewed plan, and, for a replace, the rejoin and the
// rolling apps gate after.
func Up() Verb {
	return Verb{Name: "up", Rules: upRules, plan: (*Op).planPreview, report: outcome,
		question: "Apply exactly this delta?", apply: applyPlan, after: afterReplace}
}

// UpgradeRecord is `milner upgrade`'s record: a gated up whose delta may
// only update the nodes' Talos machine configs.
func UpgradeRecord() Verb {
	return Verb{Name: "upgrade (record)", Rules: previewRules, plan: (*Op).planPreview, report: outcome,
		question: "Record these Talos configs (the nodes already hold them but for the installer reference, applied live)?",
		apply:    recordApply, verdict: recordVerdict}
}

// Upgrade is `milner upgrade`: the nodes moved one at a time by
// upgrade.Execute (its own plan, confirmed; each node health-gated in
// internal/upgrade), then UpgradeRecord.
func Upgrade() Verb {
	return Verb{Name: "upgrade", Rules: []Rule{
		{"upgrade-health-gate", Within, upgradeHealthGate},
	}, plan: upgradePlan, report: upgradeReport, apply: upgradeApply, after: upgradeAfter, whenEmpty: true}
}

// Adopt is `milner adopt`: the stack file records the ids (and the
// bootstrap, by evidence), its preview must import and replace nothing,
// else the file is put back.
func Adopt() Verb {
	return Verb{Name: "adopt", Rules: []Rule{
		{"adopt-all-libvirt", Before, adoptAllLibvirt},
		{"adoptable", Before, adoptable},
		{"adopt-apps-same-chart", Within, adoptAppsSameChart},
		{"adopt-bundle-in-state", Within, adoptBundleInState},
		{"something-to-record", Stop, somethingToRecord},
		{"adopt-one-secrets-bundle", Report, adoptOneSecretsBundle},
		{"adopt-replaces-nothing", Report, adoptReplacesNothing},
	}, plan: adoptPlan, report: adoptReport, verdict: adoptVerdict, apply: adoptApply, undo: adoptUndo, whenEmpty: true}
}

// Teardown is `milner teardown`: the whole stack listed, confirmed, its
// protection lifted and destroyed (protected again on failure).
func Teardown() Verb {
	return Verb{Name: "teardown", Rules: []Rule{
		{"teardown-cluster-name", Report, teardownClusterName},
		{"teardown-kept-volumes", Report, teardownKeptVolumes},
	}, plan: teardownPlan, report: teardownReport, verdict: teardownVerdict,
		question: "This cannot be undone.", apply: teardownApply, after: teardownAfter, whenEmpty: true}
}

// SecretsImport is `milner secrets import`: the bundle imported as the
// program's secrets resource, by an update targeted at it alone.
func SecretsImport() Verb {
	return Verb{Name: "secrets import", Rules: []Rule{
		{"import-talos-layer", Before, importTalosLayer},
		{"import-no-bundle-in-state", Before, importNoBundle},
	}, plan: func(*Op) error { return nil }, report: func(o *Op, found []Finding) *Outcome {
		return &Outcome{Stack: o.St.Name(), Backend: o.St.Backend(), Refusals: found}
	},
		apply: importApply, after: importAfter, whenEmpty: true}
}

// Tables are every gated verb's, for --explain.
func Tables() []Verb {
	return []Verb{Preview(), Up(), UpgradeRecord(), Upgrade(), Adopt(), Teardown(), SecretsImport()}
}
