# slipway developer tasks. `just --list` shows them all.

set shell := ["bash", "-euo", "pipefail", "-c"]

# Build the slipway binary (debug).
build:
    cargo build --locked

# Format check and clippy with warnings as errors, for slipway and its fuzz targets (a workspace
# member; `just fuzz` runs them). `just ci` lints the same way as it compiles.
lint:
    cargo fmt --all -- --check
    cargo clippy --locked --all-targets -- -D warnings

# Write the CRDs to crds/ and their copies in deploy/ and the Helm chart, then the release
# manifest (tests check them all).
crd:
    cargo run --locked --quiet --bin slipway -- crd > crds/plans.upgrade.cattle.io.yaml
    cp crds/plans.upgrade.cattle.io.yaml deploy/plans.upgrade.cattle.io.yaml
    cargo run --locked --quiet --bin slipway -- crd nodemaintenances > crds/nodemaintenances.nodemaintenance.medik8s.io.yaml
    cp crds/nodemaintenances.nodemaintenance.medik8s.io.yaml deploy/components/maintenance/
    cargo run --locked --quiet --bin slipway -- crd rebootpolicies > crds/rebootpolicies.slipway.dev.yaml
    cp crds/rebootpolicies.slipway.dev.yaml deploy/components/reboot-policy/
    cargo run --locked --quiet --bin slipway -- crd disruptionbudgets > crds/disruptionbudgets.slipway.dev.yaml
    cp crds/disruptionbudgets.slipway.dev.yaml deploy/disruptionbudgets.slipway.dev.yaml
    cargo run --locked --quiet --bin slipway -- crd nodeops > crds/nodeops.operator.kairos.io.yaml
    cp crds/nodeops.operator.kairos.io.yaml deploy/components/kairos/
    cargo run --locked --quiet --bin slipway -- crd nodeopupgrades > crds/nodeopupgrades.operator.kairos.io.yaml
    cp crds/nodeopupgrades.operator.kairos.io.yaml deploy/components/kairos/
    cargo run --locked --quiet --bin slipway -- crd strict-plans > deploy/components/strict-plans/policy.yaml
    just chart-files release-manifest

# Copy the files the Helm chart shares with crds/ and deploy/ into charts/slipway/files/ (Helm reads
# nothing outside the chart; tests/offline/chart.rs checks the copies).
chart-files:
    cp crds/*.yaml charts/slipway/files/crds/
    cp deploy/components/monitoring/prometheusrule.yaml deploy/components/monitoring/dashboard.json charts/slipway/files/monitoring/
    cp deploy/components/strict-plans/policy.yaml charts/slipway/files/strict-plans/

# Write dist/slipway.yaml, the single-file install (`kubectl kustomize deploy/`: the namespace, the
# Plan and DisruptionBudget CRDs, RBAC, ConfigMap, Deployment); tests/offline/deploy_manifests.rs checks it is up to date.
release-manifest:
    scripts/release-manifest.sh > dist/slipway.yaml.tmp
    mv dist/slipway.yaml.tmp dist/slipway.yaml

# Build the top-level Containerfile with buildah and compare its image with `just image`'s
# (run `just image` first).
containerfile:
    tests/containerfile/engine.sh

# Build the container image as an OCI archive (target/image/slipway-<version>.oci.tar) without a
# container engine: a static binary, CA certificates and /etc/passwd. Prints its path and digest.
image OUT="":
    scripts/image.sh {{OUT}}

# Every check, timed: one static dev-profile compile (with clippy, -D warnings) for the tests, the
# fuzz targets and CI's image, the Go tools in the background, then unit, offline and end-to-end
# tests (the scenes side by side on one local cluster); prints where the time went
# (target/ci/report.txt). SLIPWAY_E2E=skip skips the end-to-end scenes, loudly;
# SLIPWAY_E2E_SCENES (6) and SLIPWAY_E2E_FILTER choose how many and which (scripts/ci.sh).
test:
    scripts/ci.sh

# The differential test alone: system-upgrade-controller v0.20.1 (built once from the Go module
# proxy, cached) and slipway on the same cluster with the same Plans; fails on any new difference.
compat:
    #!/usr/bin/env bash
    set -euo pipefail
    # Only what the test needs (the slipway binary comes with it), before the cluster starts.
    cargo test --locked --test e2e --no-run
    tests/compat/build.sh >/dev/null
    tests/cluster/with-cluster.sh cargo test --locked --test e2e -- compat:: --nocapture

# Benchmark on a local cluster: MODE=rollout (slipway against an ideal controller, NODES=1000,
# CONCURRENCY=100) or MODE=churn (NODES=5000, PLANS=50, all done, under unrelated node updates),
# MODE=idle (the same fleet with nothing to do for SLIPWAY_BENCH_IDLE_SECS, 600) or MODE=restart
# (the controller started, SIGKILLed and started again: time to its first decision) or MODE=fleet
# (NODES=5000 with every operation at once: RebootPolicies, NodeMaintenances held by PDBs, reboot
# requests, node churn with deletes; SLIPWAY_BENCH_CHURN_SECS, 240) or MODE=soak (NODES=1000 for
# SLIPWAY_BENCH_SOAK_SECS, 3600: NodeMaintenances and NodeOps created and deleted, nodes replaced,
# Plans edited; RSS and slipway_tracked_objects every minute; fails when RSS grows over 10% after
# SLIPWAY_BENCH_SOAK_WARMUP_SECS, 600, or a map does not come back) or MODE=nodeop (NODES=3:
# kairos-operator's quick example, a NodeOp of every node with concurrency 1, cordon and drain,
# twice; seconds to Completed).
# SLIPWAY_CLUSTER_KCM_FLAGS passes flags to the cluster's controller-manager ("--kube-api-qps=100").
# MODE=decisions: the pure decisions alone at 10,000, 100,000 and 1,000,000 nodes (NODES: a
# comma-separated list of sizes instead), no cluster.
# Prints numbers; asserts nothing. SLIPWAY_BENCH_SUC=<binary> adds a line for SUC. Its `result:`
# lines are appended to docs/results.md as one line (scripts/results-log.sh; SLIPWAY_RESULTS_LOG
# names another file, /dev/null none).
bench MODE="rollout" NODES="" CONCURRENCY="100" PLANS="50":
    #!/usr/bin/env bash
    set -euo pipefail
    # The command as run again: the SLIPWAY_BENCH_ settings given, the recipe's arguments.
    settings=$(env | grep '^SLIPWAY_BENCH_' | sort | tr '\n' ' ' || true)
    command="${settings}./dev bench {{MODE}} {{NODES}} {{CONCURRENCY}} {{PLANS}}"
    if [ "{{MODE}}" = decisions ]; then
      SLIPWAY_BENCH_SIZES={{NODES}} cargo bench --locked --bench decisions \
        | scripts/results-log.sh "pure decisions" "${settings}./dev bench decisions {{NODES}}"
      exit
    fi
    # The controller as the image ships it (scripts/image.sh's build: static, with the profile of
    # pgo/; SLIPWAY_PGO=off without), alone: the workspace's release build links the fuzz targets too.
    root=$PWD; source scripts/static-env.sh
    cargo build --release --locked --target "$SLIPWAY_STATIC_TARGET" --bin slipway
    slipway_pgo_used "target/$SLIPWAY_STATIC_TARGET/release/slipway" || true
    unset RUSTFLAGS
    tests/cluster/build.sh >/dev/null
    # The audit log holds every request the bench counts, at thousands of nodes too.
    export SLIPWAY_CLUSTER_AUDIT_MB=${SLIPWAY_CLUSTER_AUDIT_MB:-500}
    SLIPWAY_BENCH_MODE={{MODE}} SLIPWAY_BENCH_NODES={{NODES}} SLIPWAY_BENCH_CONCURRENCY={{CONCURRENCY}} \
      SLIPWAY_BENCH_PLANS={{PLANS}} cargo bench --locked --bench rollout \
      | scripts/results-log.sh "{{MODE}}" "$command"

# Make the release builds' profile again (scripts/pgo.sh, half an hour): the image's build with
# LLVM's counters runs the 1,000-node rollout; its counters, merged, are pgo/slipway.profdata.xz
# (commit it). Prints the path of the release build made with it. Installs Debian's
# llvm-<rustc's LLVM major> if missing.
pgo:
    scripts/pgo.sh

# Fuzz every target of fuzz/ (or those named) for SECONDS each with libFuzzer; prints executions,
# corpus size and crashes per target, fails on a crash (the input is kept in fuzz/artifacts/).
fuzz SECONDS="60" *TARGETS:
    scripts/fuzz.sh {{SECONDS}} {{TARGETS}}

# Fault injection at full size (tests/e2e/chaos.rs; `just test` runs each scenario once, small,
# with a fixed seed): every scenario RUNS times, one after another, each run with a random seed,
# on rollouts of NODES nodes: controller kills, leader failovers, kills while nodes reboot, under
# maintenance, a RebootPolicy, a NodeOp and a DisruptionBudget, an API server restart, a paused
# etcd, a cut connection, Job and node churn, Plan edits and deletion, then a soak of Plan changes
# over SOAK_SECS. Prints a table (scenario, runs, faults, violations, longest stall) and fails on
# any violation. SLIPWAY_CHAOS_* (tests/e2e/chaos.rs) size it further; SLIPWAY_CHAOS_SEED repeats
# a run, SLIPWAY_CHAOS_SCENARIOS picks scenarios.
chaos NODES="200" RUNS="3" SOAK_SECS="3600":
    #!/usr/bin/env bash
    set -euo pipefail
    cargo test --locked --test e2e --no-run
    export SLIPWAY_CHAOS_NODES={{NODES}} SLIPWAY_CHAOS_RUNS={{RUNS}} SLIPWAY_CHAOS_SOAK_SECS={{SOAK_SECS}}
    export SLIPWAY_CHAOS_CONCURRENCY=${SLIPWAY_CHAOS_CONCURRENCY:-10}
    export SLIPWAY_CHAOS_SOAK_CYCLES=${SLIPWAY_CHAOS_SOAK_CYCLES:-300}
    tests/cluster/with-cluster.sh cargo test --locked --test e2e -- chaos::full_suite --exact --ignored --nocapture

# Start a local cluster of 5 nodes, run slipway on it and watch it upgrade them (stops everything on exit).
# `demo real`: two real nodes (QEMU guests) instead, a kubelet upgrade and a real reboot of each.
demo MODE="":
    scripts/demo.sh {{MODE}}

# What CI runs: the same as `test` (which lints as it compiles).
ci: test

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

# Build (once, cached) what real test nodes need: kubelet, kube-proxy, images, the QEMU guest image.
nodes-build:
    tests/nodes/build.sh

# Real nodes' smoke test: a local cluster with two QEMU guests (real kubelets) joined; an upgrade
# Job replaces a kubelet, a pod uses the kubernetes Service, a node really reboots; prints timings.
nodes-smoke:
    tests/nodes/smoke.sh
