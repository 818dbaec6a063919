{
  description = "Milner: a Talos Linux Kubernetes cluster as one Pulumi Go program";

  inputs = {
    nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";
    flake-utils.url = "github:numtide/flake-utils";
  };

  outputs = { self, nixpkgs, flake-utils }:
    flake-utils.lib.eachDefaultSystem (system:
      let
        pkgs = import nixpkgs { inherit system; };
        # Terraform is unfree (BSL): only the bench shell takes it, with
        # exactly that package allowed, so `nix develop` evaluates as is.
        pkgsBench = import nixpkgs {
          inherit system;
          config.allowUnfreePredicate = pkg: builtins.elem (nixpkgs.lib.getName pkg) [ "terraform" ];
        };
        tools = with pkgs; [
          go
          pulumi-bin
          talosctl
          kubectl
          kubernetes-helm
          libvirt
          libxslt # xsltproc: terraform-provider-libvirt applies the network's XSLT with it
          qemu
          golangci-lint
          postgresql # the team backend's tests
        ];
        shellHook = ''
          export PULUMI_SKIP_UPDATE_CHECK=true
          export PATH="$PWD/.tools/bin:$PATH"
        '';
      in
      {
        # `nix develop`: everything Milner and its tests use. Pulumi's Go
        # language host comes with the pulumi-bin package; provider plugins
        # are built by scripts/tools.sh where they cannot be downloaded.
        devShells.default = pkgs.mkShell { packages = tools; inherit shellHook; };

        # `nix develop .#bench`: the above plus Terraform and hyperfine for
        # bench/run.sh (Milner against the Terraform design it replaces).
        devShells.bench = pkgs.mkShell {
          packages = tools ++ [ pkgs.hyperfine pkgsBench.terraform ];
          inherit shellHook;
        };

        formatter = pkgs.nixpkgs-fmt;
      });
}
