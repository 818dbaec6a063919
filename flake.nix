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
      in
      {
        # `nix develop`: everything Milner and its tests use. Pulumi's Go
        # language host comes with the pulumi-bin package; provider plugins
        # are built by scripts/tools.sh where they cannot be downloaded.
        devShells.default = pkgs.mkShell {
          packages = with pkgs; [
            go
            pulumi-bin
            talosctl
            kubectl
            kubernetes-helm
            libvirt
            libxslt # xsltproc: terraform-provider-libvirt applies the network's XSLT with it
            qemu
            golangci-lint
            hyperfine
            terraform
          ];
          shellHook = ''
            export PULUMI_SKIP_UPDATE_CHECK=true
            export PATH="$PWD/.tools/bin:$PATH"
          '';
        };

        formatter = pkgs.nixpkgs-fmt;
      });
}
