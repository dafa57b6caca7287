#!/usr/bin/env bash
# Appends one line to docs/results.md for a benchmark run: reads the bench's output on stdin
# (passing it through), takes the lines it marks `result: `, and writes
# `| date | commit | machine | WHAT | the results, joined | COMMAND |`.
# The commit is HEAD's, with "+changes" when the tree differs from it; the machine is the cores and
# memory the run had. Nothing is written when the bench printed no result (it failed or was cut).
#
#   cargo bench ... | scripts/results-log.sh WHAT COMMAND
set -euo pipefail
what=$1 command=$2
root=$(cd "$(dirname "$0")/.." && pwd)
log=${SLIPWAY_RESULTS_LOG:-$root/docs/results.md}
results=()
while IFS= read -r line; do
  printf '%s\n' "$line"
  case $line in
    "result: "*) results+=("${line#result: }") ;;
  esac
done
[ ${#results[@]} -gt 0 ] || exit 0
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo -)
if [ "$commit" != - ] && ! git -C "$root" diff --quiet HEAD -- src benches Cargo.toml Cargo.lock 2>/dev/null; then
  commit="$commit+changes"
fi
mem=$(awk '/^MemTotal:/ { printf "%.0f", $2 / 1048576 }' /proc/meminfo 2>/dev/null || echo "?")
machine="$(nproc) cores, $mem GiB"
figure=
for r in "${results[@]}"; do
  figure+="${figure:+; }${r//|/\\|}"
done
printf '| %s | %s | %s | %s | %s | `%s` |\n' "$(date -u +%F)" "$commit" "$machine" "$what" "$figure" "$command" >> "$log"
echo "results-log: appended to ${log#"$root"/}" >&2
