#!/usr/bin/env bash
# Prints the single-file release manifest: a header, then `kubectl kustomize deploy/`.
# `just release-manifest` writes it to dist/slipway.yaml; tests/offline/deploy_manifests.rs checks it.
# The optional parts stay out of it: each kustomize component patches the base's ConfigMap, which
# a second file could only do by replacing the whole ConfigMap (and undoing another part's).
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
# shellcheck source=scripts/names.sh
source scripts/names.sh
manifest=$(kubectl kustomize deploy/)
cat <<HEADER
# slipway $version: the controller in namespace system-upgrade, with the Plan CRD, in one file.
#   kubectl apply -f slipway.yaml
# Its image is $slipway_image:$version. To run it from your registry or mirror:
#   kubectl -n system-upgrade set image deployment/system-upgrade-controller \\
#     system-upgrade-controller=registry.example.com/slipway:$version
# NodeMaintenance, RebootPolicy, the reboot agent and the monitoring kit are not in it: add them
# with the kustomize components under deploy/components/, or use the Helm chart charts/slipway.
#
# Generated from deploy/ by \`just release-manifest\` (kubectl kustomize deploy/); do not edit.
HEADER
printf '%s\n' "$manifest"
