#!/usr/bin/env bash
# A profile-guided build of the controller, measured (docs/performance.md, "Profile-guided"):
#
#   1. slipway built with LLVM's counters (-Cprofile-generate), in target/pgo/generate;
#   2. that build runs the 1,000-node rollout of `just bench` (a local cluster, fake nodes),
#      and writes its counters when it stops;
#   3. llvm-profdata (of rustc's own LLVM version, Debian's llvm-<major>) merges them into
#      target/pgo/slipway.profdata;
#   4. slipway built again with that profile (-Cprofile-use), hot and never-run code laid out
#      apart (-z keep-text-section-prefix): target/pgo/use/<host>/release/slipway.
#
# Then, to compare it with the plain release build side by side:
#   SLIPWAY_BENCH_BINARY=target/pgo/use/<host>/release/slipway just bench rollout 1000
# The image and `just bench` still build without a profile: this is the measurement, not yet
# the release process.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
say() { echo "pgo: $*" >&2; }

host=$(rustc -vV | sed -n 's/^host: //p')
major=$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
profdata=llvm-profdata-$major
if ! command -v "$profdata" >/dev/null; then
  say "installing llvm-$major for $profdata (rustc's LLVM is $major)"
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq && $sudo apt-get install -y -qq "llvm-$major" >/dev/null
fi

out=$root/target/pgo
rm -rf "$out/raw" && mkdir -p "$out/raw"
# --target keeps the flags off build scripts and proc macros, which run on the host.
say "1/4 the instrumented build"
CARGO_TARGET_DIR=$out/generate RUSTFLAGS="-Cprofile-generate=$out/raw" \
  cargo build --release --locked -p slipway --bin slipway --target "$host"

# The bench SIGKILLs the controller it started, which would lose the counters: it starts this
# wrapper instead, whose child is stopped with SIGTERM once the bench is done.
generated=$out/generate/$host/release/slipway
wrapper=$out/run-instrumented.sh
cat > "$wrapper" <<WRAP
#!/usr/bin/env bash
export LLVM_PROFILE_FILE=$out/raw/slipway-%p.profraw
"$generated" "\$@" &
wait \$!
WRAP
chmod +x "$wrapper"
say "2/4 the 1,000-node rollout, run by the instrumented build"
tests/cluster/build.sh >/dev/null
# The bench's own build without LTO: it only drives the cluster, and LTO would take 15 minutes.
CARGO_PROFILE_BENCH_LTO=off CARGO_PROFILE_BENCH_CODEGEN_UNITS=16 \
  SLIPWAY_CLUSTER_AUDIT_MB=500 SLIPWAY_BENCH_BINARY=$wrapper SLIPWAY_BENCH_MODE=rollout \
  SLIPWAY_BENCH_NODES=1000 SLIPWAY_BENCH_CONCURRENCY=100 SLIPWAY_BENCH_IDEAL=0 \
  cargo bench --locked --bench rollout >/dev/null
pkill -TERM -f "^$generated " || true
for _ in $(seq 60); do pgrep -f "^$generated " >/dev/null || break; sleep 1; done
ls "$out"/raw/slipway-*.profraw >/dev/null 2>&1 || { say "no counters were written"; exit 1; }

say "3/4 merging the counters"
"$profdata" merge -o "$out/slipway.profdata" "$out"/raw/slipway-*.profraw

say "4/4 the build with the profile"
CARGO_TARGET_DIR=$out/use \
  RUSTFLAGS="-Cprofile-use=$out/slipway.profdata -Clink-arg=-Wl,-z,keep-text-section-prefix" \
  cargo build --release --locked -p slipway --bin slipway --target "$host"
echo "$out/use/$host/release/slipway"
