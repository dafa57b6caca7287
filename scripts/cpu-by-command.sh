#!/usr/bin/env bash
# Where the CPU goes while a command runs, by process name, machine-wide: what the end-to-end
# scenes cost (docs/testing.md, "What the scenes cost"). Processes that live through the command
# count by the difference of their CPU times (ps); those that exit meanwhile by BSD process
# accounting (their whole CPU time, so one started before the command counts whole). A QEMU
# guest counts as its QEMU process: what runs inside it is the guest's own business (read its
# /proc from a privileged pod with hostPID, as the same section does).
#
#   scripts/cpu-by-command.sh OUT_DIR COMMAND...     # prints the 30 largest, then the total
#
# Needs root and the Debian package `acct` (accton, dump-acct). Run on an otherwise idle machine.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 OUT_DIR COMMAND..." >&2; exit 2; }
out=$1
shift
for tool in accton dump-acct; do
  command -v "$tool" >/dev/null || { echo "cpu-by-command: $tool is missing (apt-get install acct)" >&2; exit 1; }
done
mkdir -p "$out"
snap() { ps -eo pid=,times=,comm= | awk '{ print $1 "\t" $2 "\t" $3 }' >"$1"; }
: >"$out/pacct"
accton "$out/pacct" >/dev/null
trap 'accton off >/dev/null 2>&1 || true' EXIT
snap "$out/start"
started=$(date +%s)
rc=0
"$@" >"$out/command.log" 2>&1 || rc=$?
took=$(($(date +%s) - started))
snap "$out/end"
accton off >/dev/null
# dump-acct's user and system times are in hundredths of a second.
dump-acct "$out/pacct" 2>/dev/null | awk -F'|' '{ gsub(/ /, "", $1); print $1 "\t" ($2 + $3) / 100 }' >"$out/exited"
{
  awk -F'\t' 'FNR == NR { at[$1] = $2; next } { used[$3] += $2 - (($1 in at) ? at[$1] : 0) }
    END { for (c in used) if (used[c] >= 0.5) printf "live\t%s\t%.0f\n", c, used[c] }' "$out/start" "$out/end"
  awk -F'\t' '{ used[$1] += $2 } END { for (c in used) if (used[c] >= 0.5) printf "exited\t%s\t%.0f\n", c, used[c] }' "$out/exited"
} | sort -t$'\t' -k3,3nr >"$out/by-command.tsv"
echo "exit $rc after ${took} s; CPU seconds by process name (live: ran through it; exited: ended in it):"
head -n 30 "$out/by-command.tsv"
awk -F'\t' '{ s += $3 } END { printf "total: %.0f CPU seconds in '"$took"' s\n", s }' "$out/by-command.tsv"
exit "$rc"
