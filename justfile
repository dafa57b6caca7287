# slipway developer tasks. `just --list` shows them all.

set shell := ["bash", "-euo", "pipefail", "-c"]

# Build the slipway binary (debug).
build:
    cargo build --locked

# Format check and clippy with warnings as errors.
lint:
    cargo fmt --all -- --check
    cargo clippy --locked --all-targets -- -D warnings

# Print the CRD and write it to crds/.
crd:
    cargo run --locked --quiet -- crd > crds/plans.upgrade.cattle.io.yaml

# Unit and end-to-end tests.
test:
    cargo test --locked

# What CI runs: lint, then every test.
ci: lint test
