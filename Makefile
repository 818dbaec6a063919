# Milner's everyday commands. CI runs .ci/run, which runs `make ci`.
.PHONY: test lint vet integration tools tools-lint tools-kubeapi libvirt flake-check conformance ci

# Unit and whole-program tests (mocks; no engine, no libvirt, no network).
test:
	go test ./...

vet:
	go vet ./...

lint: tools-lint
	.tools/bin/golangci-lint run ./...

tools-lint:
	scripts/tools.sh lint

# The pinned Pulumi CLI and libvirt plugin, built into .tools/bin.
tools:
	scripts/tools.sh pulumi libvirt

# A real Kubernetes API (kube-apiserver, etcd) and the Kubernetes provider
# plugin, built into .tools/bin for tests/kubeapi.
tools-kubeapi:
	scripts/tools.sh kubeapi kubernetes

libvirt:
	scripts/libvirt-up.sh

# The real engine against a real libvirtd (root; isolated networks only) and,
# for the apps layer, against a real kube-apiserver on loopback.
integration: tools tools-kubeapi libvirt
	go test -tags integration -count=1 -timeout 45m -v ./tests/integration/ ./tests/kubeapi/

flake-check:
	nix-instantiate --parse flake.nix >/dev/null

# Docs rendered from the committed stack files must match; every stack must
# satisfy the layer rules under mocks.
conformance:
	go run ./cmd/milner docs --check
	go run ./cmd/milner check --all

ci: vet lint test flake-check conformance integration
