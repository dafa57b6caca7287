# Sourced by the release scripts: the names Cargo.toml gives a release, read once.
#   slipway_version  the version (the image's and the chart's tag)
#   slipway_home     the project's home (repository)
#   slipway_image    the published image, without its tag ([package.metadata.slipway] image)
#   slipway_chart    the published chart, an oci:// reference ([package.metadata.slipway] chart)
# shellcheck shell=bash
# shellcheck disable=SC2034 # used by the scripts that source this file
slipway_cargo() { sed -n "s/^$1 = \"\\(.*\\)\"\$/\\1/p" "$(dirname "${BASH_SOURCE[0]}")/../Cargo.toml" | head -n 1; }
slipway_version=$(slipway_cargo version)
slipway_home=$(slipway_cargo repository)
slipway_image=$(slipway_cargo image)
slipway_chart=$(slipway_cargo chart)
