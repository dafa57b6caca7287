# Sourced by the tool build scripts. build_lock BIN : holds a lock beside BIN's directory until the
# script exits, so one build runs at a time: a scene that asks for a tool while CI's background
# chain is building it waits for that build instead of starting its own.
build_lock() {
  mkdir -p "$(dirname "$1")"
  exec 9>"$(dirname "$1").lock"
  flock 9
}
