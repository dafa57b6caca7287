#!/usr/bin/env bash
# Every check CI runs (`just ci`, which `./dev test` and .ci/run call), timed, with one report at
# the end of where the time went.
#
# One compile of the Rust code serves every check: the dev profile, linked statically (as the
# image's binary must be), with clippy as the compiler of the workspace's own crates (-D warnings),
# for the library, the binary, the tests, the benches and the fuzz targets; CI's image is built
# from that same binary (a release build would compile everything again). The Go tools build in
# the background meanwhile, the cluster and the real nodes' image first. Then the unit tests, and
# the end-to-end scenes (side by side, against one local cluster) as soon as the cluster and the
# guest image are built: beside them the arm64 build, the other tools, the offline tests, the
# release check and SUC's own e2e suite (tests/suc-e2e/ci.sh). On a cold machine the tools take longer than the compile, and the scenes (the
# real nodes' chain above all) are most of the run, so they no longer wait for every tool.
#
# Report: target/ci/report.txt (each phase and each scene with its seconds, how long the critical
# path waited for the tools building beside it, and the total); logs of each phase in
# target/ci/logs/.
#   SLIPWAY_E2E=skip          skip the end-to-end scenes (loudly)
#   SLIPWAY_E2E_SCENES=N      scenes at once (default 6; tests/e2e/support/turns.rs orders them)
#   SLIPWAY_E2E_FILTER=...    only the scenes whose name contains it (libtest's filter)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

ci=$root/target/ci
logs=$ci/logs
rm -rf "$ci"
mkdir -p "$logs"
phases=$ci/phases.tsv
export SLIPWAY_TEST_REPORT=$ci/scenes.tsv
# Every wait of a second or more inside a scene (tests/e2e/support's wait_for): scene, what, seconds.
export SLIPWAY_TEST_WAITS=$ci/waits.tsv
: >"$phases"
: >"$SLIPWAY_TEST_REPORT"
: >"$SLIPWAY_TEST_WAITS"
started=$(date +%s)

say() { echo "ci: $*" >&2; }

# phase NAME COMMAND... : runs COMMAND, its output in logs/NAME.log (and on the console too when
# SHOW=1), and records how long it took; on failure prints the end of the log and returns 1.
phase() {
  local name=$1 start rc=0
  shift
  start=$(date +%s)
  say "$name"
  if [ "${SHOW:-0}" = 1 ]; then
    "$@" 2>&1 | tee "$logs/$name.log" || rc=$?
  else
    "$@" >"$logs/$name.log" 2>&1 || rc=$?
  fi
  local took=$(($(date +%s) - start)) outcome=ok
  [ "$rc" -eq 0 ] || outcome=FAILED
  printf 'phase\t%s\t%s\t%s\n' "$name" "$outcome" "$took" >>"$phases"
  if [ "$rc" -ne 0 ]; then
    [ "${SHOW:-0}" = 1 ] || tail -n 60 "$logs/$name.log" >&2
    say "$name FAILED after ${took}s (log: $logs/$name.log)"
    return 1
  fi
  say "$name ok (${took}s)"
}

report() {
  local total=$(($(date +%s) - started))
  {
    echo "== where the time went (seconds; phases in the order they ended; the tools build in the background) =="
    awk -F'\t' '{ printf "%-34s %-7s %6d\n", $2, $3, $4 }' "$phases"
    if [ -s "$SLIPWAY_TEST_REPORT" ]; then
      echo "-- scenes, longest first (seconds running, seconds waiting for their turn) --"
      sort -t$'\t' -k4,4nr "$SLIPWAY_TEST_REPORT" |
        awk -F'\t' '{ printf "%-72s %-7s %6.1f %6.1f\n", $2, $3, $4, $5 }'
      awk -F'\t' '{ n++; s += $4; if ($3 != "ok") f++ } END { printf "%d scenes, %d not ok, %.0f scene-seconds\n", n, f, s }' "$SLIPWAY_TEST_REPORT"
    fi
    if grep -q $'\tthe tool ' "$SLIPWAY_TEST_WAITS" 2>/dev/null; then
      echo "-- scenes waiting for a tool built beside them (seconds; their turn held meanwhile) --"
      awk -F'\t' '$2 ~ /^the tool / { printf "%-60s %-56s %6.1f\n", substr($1, 1, 60), substr($2, 1, 56), $3 }' "$SLIPWAY_TEST_WAITS"
    fi
    if [ -s "$SLIPWAY_TEST_WAITS" ]; then
      echo "-- the 25 longest waits inside scenes (seconds; all in $SLIPWAY_TEST_WAITS) --"
      # awk stops printing rather than head stopping reading: sort must not die of SIGPIPE (141).
      sort -t$'\t' -k3,3nr "$SLIPWAY_TEST_WAITS" |
        awk -F'\t' 'NR <= 25 { printf "%-60s %-56s %6.1f\n", substr($1, 1, 60), substr($2, 1, 56), $3 }'
    fi
    echo "total: ${total}s ($((total / 60)) min $((total % 60)) s)"
    failures
  } | tee "$ci/report.txt" >&2
}

# Why each failed test failed, last: a record that keeps only the end of a run's output (the
# scenes' console lines fill the middle) still says it. From libtest's failures section of each
# test phase's log: the test's name, then the panic and its message (a few lines, each cut short).
failures() {
  local log
  for log in "$logs"/unit.log "$logs"/doc.log "$logs"/offline.log "$logs"/e2e.log; do
    [ -s "$log" ] || continue
    awk -v phase="$(basename "$log" .log)" '
      /^---- .* stdout ----$/ { name = $2; keep = 0; next }
      /^failures:$/ { name = ""; keep = 0; next }
      name != "" && / panicked at / {
        if (!said++) print "-- why the tests of " phase " failed --"
        print name; print "    " substr($0, 1, 300); keep = 1; n = 0; next
      }
      keep && (/^note: run with/ || /^$/) { keep = 0; next }
      keep && n < 8 { print "    " substr($0, 1, 300); n++ }
    ' "$log"
  done
}
tools=""
finish() {
  # The run's own outcome is the exit code: the report is for reading, it never changes it.
  local rc=$?
  # A failure in the foreground leaves no tool build running behind it.
  [ -z "$tools" ] || kill "$tools" 2>/dev/null || true
  report || say "the report failed (exit $?); the run's outcome stands"
  exit "$rc"
}
trap finish EXIT

# --- the build -------------------------------------------------------------------------------
# Go tools, in the background: the local cluster, the real nodes' guest image (its kubelet from
# the cluster's module) and the registry they pull slipway's image from first, as the end-to-end
# scenes start as soon as those and the compile are there; the other tools after them (below).
(
  phase cluster-binaries tests/cluster/build.sh
  phase real-nodes tests/nodes/build.sh
  phase registry tests/tools/registry/build.sh
) &
tools=$!

# The quick-start scene builds the image again from this compile; it must not be a release build.
export SLIPWAY_IMAGE_PROFILE=dev
# shellcheck source=scripts/static-env.sh
source "$root/scripts/static-env.sh"
target=$SLIPWAY_STATIC_TARGET
# The compiled dependencies are kept between runs, outside the clone, per toolchain and lockfile
# (the two newest are kept). slipway's own crates are compiled afresh: their old artifacts, from
# this or another clone, are removed first.
if [ -z "${CARGO_TARGET_DIR:-}" ]; then
  cache_root="${SLIPWAY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/slipway}"
  key=$({ rustc -vV; cat Cargo.lock; } | sha256sum | cut -c1-16)
  export CARGO_TARGET_DIR=$cache_root/cargo-target/$key
  mkdir -p "$CARGO_TARGET_DIR"
  touch "$CARGO_TARGET_DIR"
  # shellcheck disable=SC2012 # names are ours: hex keys
  ls -1t "$cache_root/cargo-target" | tail -n +3 | while read -r old; do rm -rf "${cache_root:?}/cargo-target/$old"; done
  phase clean cargo clean --locked --target "$target" -p slipway -p slipway-fuzz
fi
clippy=$(command -v clippy-driver || rustup which clippy-driver)
export RUSTC_WORKSPACE_WRAPPER=$clippy
# cargo clippy's way of passing lint flags to clippy-driver.
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"

phase fmt cargo fmt --all -- --check
# The workspace's default members: slipway and its fuzz targets.
phase build cargo build --locked --target "$target" --all-targets
phase image scripts/image.sh
# The top-level Containerfile built by buildah, against that image.
phase containerfile tests/containerfile/engine.sh
SHOW=1 phase unit cargo test --locked --target "$target" --lib --bin slipway
SHOW=1 phase doc cargo test --locked --target "$target" --doc

# --- the end-to-end scenes, beside the rest ---------------------------------------------------
# They are most of the run (the real nodes' chain), so they start once the cluster, the guest
# image and this compile are there; the arm64 build, the other tools, the offline tests and the
# release check run beside them at a lower priority. A failure from here on is reported once the
# scenes are done (no scene is cut short, no guest left running).
# waited NAME SINCE : records how long the critical path waited for tools built beside it.
waited() {
  printf 'phase\t%s\t%s\t%s\n' "$1" waited "$(($(date +%s) - $2))" >>"$phases"
}
since=$(date +%s)
if ! wait "$tools"; then
  tools=""
  say "the cluster's, the real nodes' or the registry's build failed (its log is in $logs)"
  exit 1
fi
waited "wait: cluster, guest image, registry" "$since"
# The other tools, at a lower priority beside the first scenes: SUC (the differential test), Helm
# and Alertmanager (a scene that needs one before it is built waits: each build script holds a
# lock while it builds), cosign (the installs' real nodes, which come after the shared pair's,
# verify slipway's image before they boot; the release check), promtool, the GitOps health
# checker and actionlint (the offline tests), the image checker and, last, cargo-cyclonedx (the
# release check).
(
  renice -n 5 -p "$BASHPID" >/dev/null
  phase suc tests/compat/build.sh
  phase helm tests/tools/helm/build.sh
  phase alertmanager tests/tools/alertmanager/build.sh
  phase cosign tests/tools/cosign/build.sh
  phase promtool tests/tools/promtool/build.sh
  phase gitops-health tests/tools/gitops-health/build.sh
  phase ocicheck tests/tools/ocicheck.sh
  phase actionlint tests/tools/actionlint/build.sh
  phase suc-e2e-build tests/suc-e2e/build.sh
  phase cyclonedx tests/tools/cyclonedx/build.sh
) &
tools=$!
PATH="$(tests/cluster/build.sh):$PATH"
export PATH
# The real nodes pull the image this run built, published to a registry on the host.
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
export SLIPWAY_IMAGE_ARCHIVE="$root/target/image/slipway-$version.oci.tar"
# The scenes' binary is run directly: through cargo it would first wait for the arm64 build's
# lock on the target directory (a cold cross build takes ten minutes).
e2e_bin=$(cargo test --locked --target "$target" --test e2e --no-run --message-format=json |
  sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
if [ ! -x "$e2e_bin" ]; then
  say "no end-to-end test binary from this compile"
  exit 1
fi
# A thread for every scene: each asks for its turn at once, and the scenes' own scheduler starts
# them, SLIPWAY_E2E_SCENES at a time, longest chains first.
e2e=("$e2e_bin" --test-threads=512)
[ -z "${SLIPWAY_E2E_FILTER:-}" ] || e2e+=("$SLIPWAY_E2E_FILTER")
[ "${SLIPWAY_E2E:-}" = skip ] || e2e=(tests/cluster/with-cluster.sh "${e2e[@]}")
(SHOW=1 phase e2e "${e2e[@]}") &
scenes=$!

failed=0
# What nothing waits for runs at nice 19, on what the scenes leave: an emulated guest's boots and
# waits are measured in wall time, and a chain of real scenes leaves most of a core idle.
# linux/arm64: the binary cross-built (its dependencies kept with the others) and run under qemu.
phase arm64 nice -n 19 scripts/arm64.sh || failed=1
since=$(date +%s)
if ! wait "$tools"; then
  say "a tool build failed (its log is in $logs)"
  failed=1
fi
tools=""
waited "wait: the other tools" "$since"
if [ "$failed" = 0 ]; then
  phase offline nice -n 19 cargo test --locked --target "$target" --test offline || failed=1
fi
# What a release ships, from this compile: the CLI's archives and the two-platform image.
if [ "$failed" = 0 ]; then
  phase release nice -n 19 tests/release/check.sh || failed=1
fi
# SUC's own e2e suite under SUC, under slipway, and under slipway on SUC's CRD, each on a cluster
# of its own, beside the real nodes' chain; at nice 5, not 19: some of its specs pass only if the
# controller answers an edit within about a second.
if [ "$failed" = 0 ] && [ "${SLIPWAY_E2E:-}" != skip ]; then
  SHOW=1 phase suc-e2e nice -n 5 tests/suc-e2e/ci.sh "$CARGO_TARGET_DIR/$target/debug/slipway" "$logs/suc-e2e" || failed=1
fi
wait "$scenes" || failed=1
exit "$failed"
