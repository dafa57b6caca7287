#!/usr/bin/env bash
# A cold CI run, as on a fresh machine with only Rust and Go: a fresh clone of HEAD, run by
# `.ci/run` with an empty HOME, so no cargo registry, no compiled dependencies, no Go module or
# build cache and no ~/.cache/slipway. Nothing of the caller's environment that points at a cache
# is passed on (CARGO_TARGET_DIR above all: a cold run that inherits it compiles into the warm
# target directory, and any build beside it makes the two recompile each other's dependencies).
# The machine should be idle meanwhile: the figure is the run's wall time.
#
#   scripts/cold-ci.sh [WORKDIR]        default /tmp/slipway-cold; prints the exit code, the
#                                       seconds, and where the report and the log are
#   SLIPWAY_COLD_DRY=1 scripts/cold-ci.sh   print the environment the run would get, and stop
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-/tmp/slipway-cold}
cargo=$(command -v cargo) || { echo "cold-ci: cargo not found" >&2; exit 1; }
go=$(command -v go) || { echo "cold-ci: go not found" >&2; exit 1; }
rustup_home=${RUSTUP_HOME:-$HOME/.rustup}
# Rust's and Go's own directories, then the system's: nothing else the caller installed.
path="$(dirname "$cargo"):$(dirname "$go"):/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
fresh=(env -i HOME="$work/home" RUSTUP_HOME="$rustup_home" PATH="$path" CI=true LANG=C.UTF-8)
# How this machine reaches its package mirrors and proxies, which a fresh one has set up too.
for name in $(compgen -e); do
  case "$name" in
    GOPROXY | GONOSUMDB | GONOSUMCHECK | GOSUMDB | GOPRIVATE | GOFLAGS | GOTOOLCHAIN | PIP_* | \
      HTTP_PROXY | HTTPS_PROXY | NO_PROXY | http_proxy | https_proxy | no_proxy | SSL_CERT_FILE)
      fresh+=("$name=${!name}") ;;
  esac
done
if [ "${SLIPWAY_COLD_DRY:-}" = 1 ]; then
  mkdir -p "$work/home"
  "${fresh[@]}" bash -c 'env | sort; echo "cargo home: ${CARGO_HOME:-$HOME/.cargo}"; go env GOPATH GOCACHE GOMODCACHE'
  exit 0
fi
rm -rf "$work"
mkdir -p "$work/home"
git clone -q "$root" "$work/clone"
start=$(date +%s)
rc=0
(cd "$work/clone" && "${fresh[@]}" bash .ci/run) >"$work/run.log" 2>&1 || rc=$?
echo "cold-ci: exit $rc after $(($(date +%s) - start)) s; report: $work/clone/target/ci/report.txt; log: $work/run.log"
exit "$rc"
