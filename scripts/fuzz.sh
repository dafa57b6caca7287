#!/usr/bin/env bash
# Runs every fuzz target of fuzz/ for SECONDS each (libFuzzer through cargo-fuzz, installed once),
# then prints a table: target, executions, corpus size, crashes. Exits 1 on any crash; the
# failing input is kept in fuzz/artifacts/<target>/.
#
# cargo-fuzz wants nightly for its sanitizers; slipway is memory-safe Rust, so the targets run
# without one (--sanitizer none) on the stable toolchain (RUSTC_BOOTSTRAP for cargo-fuzz's flags).
# Each target runs with an RSS limit and a per-allocation limit: unbounded allocation is a crash.
# With debug assertions and overflow checks (--debug-assertions): an arithmetic overflow that a
# release build would wrap silently (a Go duration did) is a crash too.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^slipway-fuzz$')
fi
if ! command -v cargo-fuzz >/dev/null; then
  cargo install cargo-fuzz --locked --version 0.13.2
fi
export RUSTC_BOOTSTRAP=1
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target/fuzz}"
logs=$(mktemp -d)
rows=()
failed=0
for t in "${targets[@]}"; do
  mkdir -p "fuzz/corpus/$t"
  echo "fuzz: $t for ${seconds}s" >&2
  rc=0
  seeds=()
  # The Plans of examples/ and of the differential test seed the Plan target.
  if [ "$t" = plan ]; then seeds=(examples tests/compat/plans); fi
  cargo fuzz run --sanitizer none --debug-assertions "$t" "fuzz/corpus/$t" "${seeds[@]}" -- \
    -max_total_time="$seconds" -rss_limit_mb=1024 \
    -malloc_limit_mb=256 -timeout=10 -print_final_stats=1 >"$logs/$t.log" 2>&1 || rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$logs/$t.log" | tail -n 1)
  corpus=$(find "fuzz/corpus/$t" -type f | wc -l)
  crashes=0
  if [ "$rc" -ne 0 ]; then
    crashes=1
    failed=1
    grep -E "panicked|ERROR: libFuzzer|SUMMARY" "$logs/$t.log" | head -n 5 >&2 || true
    echo "fuzz: $t failed; full log: $logs/$t.log" >&2
  fi
  rows+=("$(printf '%-18s %12s %8s %8s' "$t" "${runs:-?}" "$corpus" "$crashes")")
done
printf '%-18s %12s %8s %8s\n' target executions corpus crashes
printf '%s\n' "${rows[@]}"
exit "$failed"
