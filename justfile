# slipway developer tasks. `just --list` shows them all.

set shell := ["bash", "-euo", "pipefail", "-c"]

# Build the slipway binary (debug).
build:
    cargo build --locked

# Format check and clippy with warnings as errors.
lint:
    cargo fmt --all -- --check
    cargo clippy --locked --all-targets -- -D warnings

# Write the CRD to crds/ and its copy in the kustomize base deploy/ (tests check both).
crd:
    cargo run --locked --quiet -- crd > crds/plans.upgrade.cattle.io.yaml
    cp crds/plans.upgrade.cattle.io.yaml deploy/plans.upgrade.cattle.io.yaml

# Build the container image slipway:<version> from the Containerfile, with podman or docker.
image TAG="":
    #!/usr/bin/env bash
    set -euo pipefail
    engine=$(command -v podman || command -v docker || true)
    if [ -z "$engine" ]; then
      echo "just image: neither podman nor docker is installed; install one of them to build the image" >&2
      exit 1
    fi
    if ! "$engine" info >/dev/null 2>&1; then
      echo "just image: $engine is installed but cannot reach a container engine (is its daemon or service running?): $("$engine" info 2>&1 | tail -n 1)" >&2
      exit 1
    fi
    # The Containerfile uses RUN --mount (cache mounts): BuildKit for docker, built in for podman.
    export DOCKER_BUILDKIT=1
    version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
    tag="{{TAG}}"
    tag=${tag:-slipway:$version}
    "$engine" build -f Containerfile --build-arg VERSION="$version" -t "$tag" .
    echo "built $tag ($("$engine" image inspect --format '{{{{.Size}}' "$tag") bytes)" >&2

# Unit and end-to-end tests. The end-to-end tests share one local cluster, started here (the first
# run builds it: ~15 minutes). SLIPWAY_E2E=skip skips them, loudly.
test:
    #!/usr/bin/env bash
    set -euo pipefail
    cargo build --locked --all-targets
    if [ "${SLIPWAY_E2E:-}" = skip ] || [ -n "${SLIPWAY_TEST_KUBECONFIG:-}" ]; then
      exec cargo test --locked
    fi
    tests/cluster/build.sh >/dev/null
    dir=$(mktemp -d /tmp/slipway-test.XXXXXX)
    trap 'tests/cluster/down.sh "$dir" >/dev/null 2>&1 || true' EXIT
    SLIPWAY_CLUSTER_DIR="$dir" SLIPWAY_CLUSTER_OWNER_PID=$$ tests/cluster/up.sh 3 >/dev/null
    SLIPWAY_TEST_KUBECONFIG="$dir/kubeconfig" cargo test --locked

# Start a local cluster of 5 nodes, run slipway on it and watch it upgrade them (stops everything on exit).
demo:
    scripts/demo.sh

# What CI runs: lint, then every test.
ci: lint test

# Build (once, cached) the local test cluster's binaries: kube-apiserver & co, etcd, kwok.
cluster-build:
    tests/cluster/build.sh

# Start a local test cluster with NODES fake nodes; prints `export KUBECONFIG=...`.
cluster-up NODES="3":
    #!/usr/bin/env bash
    set -euo pipefail
    out=$(tests/cluster/up.sh "{{NODES}}")
    line=$(tail -n 1 <<<"$out")
    kubeconfig=${line#export KUBECONFIG=}
    state="${XDG_CACHE_HOME:-$HOME/.cache}/slipway"
    mkdir -p "$state"
    echo "$(dirname "$kubeconfig")" >"$state/current-cluster"
    echo "# use it with kubectl (and SLIPWAY_TEST_KUBECONFIG for cargo test):" >&2
    echo "$line"
    echo "export SLIPWAY_TEST_KUBECONFIG=$kubeconfig"

# Stop the cluster started by the last `just cluster-up` (or DIR) and remove its directory.
cluster-down DIR="":
    #!/usr/bin/env bash
    set -euo pipefail
    state="${XDG_CACHE_HOME:-$HOME/.cache}/slipway/current-cluster"
    dir="{{DIR}}"
    if [ -z "$dir" ]; then
      if [ ! -f "$state" ]; then echo "no cluster recorded in $state" >&2; exit 1; fi
      dir=$(cat "$state")
    fi
    tests/cluster/down.sh "$dir"
    if [ -f "$state" ] && [ "$(cat "$state")" = "$dir" ]; then rm -f "$state"; fi
