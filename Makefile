# Milner's everyday commands. `make ci` is the README's test command and
# what CI runs (.ci/run): on a fresh Debian machine, as root, it installs
# and starts what its tests need (scripts/ci-deps.sh), builds the pinned
# tools into .tools/bin, and runs every check.
.PHONY: build test lint vet integration runtime tools tools-lint tools-kubeapi tools-proxmoxve tools-validate tools-talos deps flake-check conformance ci

export PATH := /usr/local/go/bin:$(PATH)
export PULUMI_SKIP_UPDATE_CHECK := true

# The milner binary, into bin/ (git-ignored). `go install ./cmd/milner` puts it on GOPATH/bin.
build:
	go build -o bin/milner ./cmd/milner

# Unit and whole-program tests (mocks; no engine, no libvirt, no network),
# then the real upstream charts rendered with Helm's engine (tests/render, a
# module of its own; it reads ../shared/charts or $$MILNER_CHARTS_DIR).
test: tools-validate
	go test ./...
	cd tests/render && GOWORK=off go test -count=1 ./...

vet:
	go vet ./...

lint: tools-lint
	.tools/bin/golangci-lint run ./...

tools-lint:
	scripts/tools.sh lint

# The Talos config validators, one per machinery version (the provider's
# v1.12.0, the nodes' v1.9.5), for `milner check` and internal/conformance.
tools-validate:
	scripts/tools.sh talos-validate

# The pinned Pulumi CLI and libvirt plugin, built into .tools/bin.
tools:
	scripts/tools.sh pulumi libvirt

# The Talos provider plugin (pulumi-resource-talos, the release the program's
# SDK asks for), built from its unmodified upstream source in ../shared/providers
# (or $$MILNER_PROVIDERS_DIR) into .tools/bin.
tools-talos:
	scripts/tools.sh talos

# Debian packages and daemons the checks need: nix-bin (flake check),
# libvirt/QEMU (started). Installs only what is missing; never changes what
# the machine already had.
deps:
	scripts/ci-deps.sh

# A real Kubernetes API (kube-apiserver, etcd) and the Kubernetes provider
# plugin, built into .tools/bin for tests/kubeapi.
tools-kubeapi:
	scripts/tools.sh kubeapi kubernetes

# The Proxmox VE provider plugin, built from ../shared/providers, for
# tests/pveengine (the prod substrate against the PVE API double).
tools-proxmoxve:
	scripts/tools.sh proxmoxve

# The real engine against a real libvirtd (root; isolated networks only) and,
# for the apps layer, against a real kube-apiserver on loopback; one package
# at a time (-p 1): both are heavy for two cores.
integration: deps tools tools-kubeapi tools-talos tools-proxmoxve
	go test -tags integration -count=1 -p 1 -timeout 60m -v ./tests/integration/ ./tests/kubeapi/ ./tests/pveengine/

# The apps' pods on a real kubelet (tests/kubeapi TestAppsRunOnARealKubelet):
# Debian's containerd, runc and CNI plugins, the node's tools and the
# binaries of its images. Not part of `make ci`: building Vault alone takes
# longer than CI's time has left (docs/verification.md).
runtime: deps tools tools-kubeapi
	scripts/tools.sh kubelet local-path-provisioner coredns vault metallb
	go test -tags 'integration runtime' -count=1 -p 1 -timeout 30m -v -run '^TestAppsRunOnARealKubelet$$' ./tests/kubeapi/

# nix cannot fetch nixpkgs here, so the flake is parsed, not evaluated
# (docs/verification.md).
flake-check: deps
	nix-instantiate --parse flake.nix >/dev/null

# Docs rendered from the committed stack files and commands must match;
# every stack must satisfy the layer rules under mocks, and its node configs,
# generated with the provider's machinery, the machinery of its talosVersion.
conformance: tools-validate
	go run ./cmd/milner docs --check
	go run ./cmd/milner check --all

ci: deps vet lint test flake-check conformance integration
