# Milner's everyday commands. CI runs .ci/run, which runs `make ci`.
.PHONY: test lint vet integration tools tools-lint libvirt flake-check conformance ci

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

libvirt:
	scripts/libvirt-up.sh

# The real engine against a real libvirtd (root; isolated networks only).
integration: tools libvirt
	go test -tags integration -count=1 -timeout 45m -v ./tests/integration/

flake-check:
	nix-instantiate --parse flake.nix >/dev/null

# Docs rendered from the committed stack files must match; every stack must
# satisfy the layer rules under mocks.
conformance:
	go run ./cmd/milner docs --check
	go run ./cmd/milner check --all

ci: vet lint test flake-check conformance integration
