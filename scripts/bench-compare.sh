#!/usr/bin/env bash
# The pure decisions of two commits, timed in one run: benches/decisions.rs built at each (the
# bench profile without LTO, which takes 20 minutes with it; the target directory is shared, in
# ~/.cache/slipway/bench-compare), then run in turn ROUNDS times, the order swapped every round.
# Prints the median of each scenario and size at each commit and the ratio NEW/OLD, and appends
# the ratios to docs/results.md (scripts/results-log.sh).
#
#   scripts/bench-compare.sh OLD [NEW (HEAD)] [SIZES (1000,5000)] [ROUNDS (21)]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
old=$(git -C "$root" rev-parse --short "$1") new=$(git -C "$root" rev-parse --short "${2:-HEAD}")
sizes=${3:-1000,5000} rounds=${4:-21}
work=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$work/old" 2>/dev/null; git -C "$root" worktree remove --force "$work/new" 2>/dev/null; rm -rf "$work"' EXIT
export CARGO_TARGET_DIR=${XDG_CACHE_HOME:-$HOME/.cache}/slipway/bench-compare
export CARGO_PROFILE_BENCH_LTO=off CARGO_PROFILE_BENCH_CODEGEN_UNITS=16 CARGO_PROFILE_BENCH_STRIP=none
for side in old new; do
  git -C "$root" worktree add -q --detach "$work/$side" "${!side}"
  # Cargo takes a workspace's files by their path inside it and their times: a second checkout
  # older than the last build would pass for built.
  find "$work/$side/src" "$work/$side/benches" -name '*.rs' -exec touch {} +
  (cd "$work/$side" && cargo bench --locked --bench decisions --no-run --message-format=json 2>/dev/null) |
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("target", {}).get("name") == "decisions" and m.get("executable"):
        print(m["executable"])' | tail -1 | xargs -I{} cp {} "$work/bench-$side"
done
SLIPWAY_BENCH_SIZES=$sizes python3 - "$work" "$old" "$new" "$rounds" <<'PY' | "$root/scripts/results-log.sh" "pure decisions, $new against $old, sizes $sizes, $rounds rounds" "scripts/bench-compare.sh $old $new $sizes $rounds"
import collections, re, statistics, subprocess, sys
work, old, new, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
times = {"old": collections.defaultdict(list), "new": collections.defaultdict(list)}
for r in range(rounds):
    for side in (("old", "new") if r % 2 == 0 else ("new", "old")):
        out = subprocess.run([f"{work}/bench-{side}", "--bench"], capture_output=True, text=True, check=True).stdout
        for m in re.finditer(r"decisions (\S+)\s+nodes=(\d+)\s+ms=([\d.]+)", out):
            times[side][(m.group(1), int(m.group(2)))].append(float(m.group(3)))
print(f"{'scenario':<14}{'nodes':>8}{old + ' ms':>14}{new + ' ms':>14}{'ratio':>8}")
ratios = []
for key in sorted(times["old"]):
    o, n = statistics.median(times["old"][key]), statistics.median(times["new"][key] or [float("nan")])
    print(f"{key[0]:<14}{key[1]:>8}{o:>14.3f}{n:>14.3f}{n / o:>8.3f}")
    ratios.append(f"{key[0]} {key[1]} {n / o:.2f}x")
print("result: " + ", ".join(ratios))
PY
