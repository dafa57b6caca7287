#!/usr/bin/env bash
# Makes pgo/slipway.profdata.xz, the profile every release build of slipway is built with
# (scripts/static-env.sh; docs/performance.md, "A profile-guided build"):
#
#   1. the release build (static, as the image's) with LLVM's counters (-Cprofile-generate), in
#      target/pgo/generate;
#   2. that build runs the 1,000-node rollout of `just bench` (a local cluster, fake nodes) and
#      writes its counters when it stops;
#   3. llvm-profdata (of rustc's own LLVM version, Debian's llvm-<major>) merges them, and xz
#      packs them into pgo/slipway.profdata.xz, and the functions that ran, in the link order
#      rust-lld is given, into pgo/slipway.order.xz (commit both);
#   4. the release build with it, as scripts/image.sh builds it: its path is printed last.
#
# Run it again when the code a rollout runs has changed much, or rustc's LLVM: LLVM builds each
# function whose control flow changed since without the profile, so an old profile does no harm,
# it only helps less. To compare with a build without it, side by side:
#   SLIPWAY_BENCH_BINARY=<path> just bench rollout 1000; SLIPWAY_PGO=off just bench rollout 1000
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
say() { echo "pgo: $*" >&2; }

major=$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
profdata=llvm-profdata-$major
if ! command -v "$profdata" >/dev/null; then
  say "installing llvm-$major for $profdata (rustc's LLVM is $major)"
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq && $sudo apt-get install -y -qq "llvm-$major" >/dev/null
fi

out=$root/target/pgo
rm -rf "$out/raw" && mkdir -p "$out/raw"
# The release build's flags without a profile, and the counters on top: the functions of the
# build that uses the profile must be the same ones.
# shellcheck source=scripts/static-env.sh
SLIPWAY_IMAGE_PROFILE=release SLIPWAY_PGO=off source "$root/scripts/static-env.sh"
host=$SLIPWAY_STATIC_TARGET
say "1/4 the instrumented build"
CARGO_TARGET_DIR=$out/generate RUSTFLAGS="$RUSTFLAGS -Cprofile-generate=$out/raw" \
  cargo build --release --locked --bin slipway --target "$host"

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
(
  unset RUSTFLAGS
  CARGO_PROFILE_BENCH_LTO=off CARGO_PROFILE_BENCH_CODEGEN_UNITS=16 \
    SLIPWAY_CLUSTER_AUDIT_MB=500 SLIPWAY_BENCH_BINARY=$wrapper SLIPWAY_BENCH_MODE=rollout \
    SLIPWAY_BENCH_NODES=1000 SLIPWAY_BENCH_CONCURRENCY=100 SLIPWAY_BENCH_IDEAL=0 \
    cargo bench --locked --bench rollout >/dev/null
)
pkill -TERM -f "^$generated " || true
for _ in $(seq 60); do pgrep -f "^$generated " >/dev/null || break; sleep 1; done
ls "$out"/raw/slipway-*.profraw >/dev/null 2>&1 || { say "no counters were written"; exit 1; }

say "3/4 merging the counters into pgo/slipway.profdata.xz and pgo/slipway.order.xz"
"$profdata" merge -o "$out/slipway.profdata" "$out"/raw/slipway-*.profraw
mkdir -p pgo
xz -9 -T1 -c "$out/slipway.profdata" > pgo/slipway.profdata.xz.tmp
mv pgo/slipway.profdata.xz.tmp pgo/slipway.profdata.xz
# The link order: every function that ran (a counter above 0), the most run first; a name is the
# symbol after the profile's "<unit>;" prefix.
"$profdata" merge --text -o - "$out/slipway.profdata" | awk '
  state == 0 && NF && !/^[#:]/ { name = $0; state = 1; next }
  state == 1 && /^# Num Counters:/ { getline n; state = 2; next }
  state == 2 && /^# Counter Values:/ {
    max = 0
    for (i = 0; i < n; i++) { getline v; if (v + 0 > max) max = v + 0 }
    if (max > 0) { sub(/^.*;/, "", name); printf "%d\t%s\n", max, name }
    state = 3; next
  }
  state == 3 && !NF { state = 0 }
' | LC_ALL=C sort -t "$(printf '\t')" -k1,1nr -k2,2 | cut -f2 > "$out/slipway.order"
[ -s "$out/slipway.order" ] || { say "no function ran"; exit 1; }
xz -9 -T1 -c "$out/slipway.order" > pgo/slipway.order.xz

say "4/4 the release build with it"
# shellcheck source=scripts/static-env.sh
SLIPWAY_IMAGE_PROFILE=release SLIPWAY_PGO=on source "$root/scripts/static-env.sh"
cargo build --release --locked --bin slipway --target "$host"
binary=${CARGO_TARGET_DIR:-$root/target}/$host/release/slipway
slipway_pgo_used "$binary"
echo "$binary"
