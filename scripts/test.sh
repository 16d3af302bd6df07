#!/usr/bin/env bash
# Runs every test of the workspace, installing first what the tests need and
# the machine lacks: a Vulkan driver (Mesa lavapipe) for the real-device tests
# and the wasm32 target for the browser build of the core.
set -euo pipefail
cd "$(dirname "$0")/.."

sudo_=""
[ "$(id -u)" -eq 0 ] || sudo_="sudo"
need=()
ls /usr/share/vulkan/icd.d/lvp_icd.*.json >/dev/null 2>&1 || need+=(mesa-vulkan-drivers)
ldconfig -p | grep -q 'libvulkan.so.1 ' || need+=(libvulkan1)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]} (Debian packages) for the real-device tests"
  $sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq "${need[@]}" >/dev/null
fi
if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  rustup target add wasm32-unknown-unknown
fi
if [ ! -d ../shared/traces ]; then
  echo "error: ../shared/traces is missing: the trace tests replay the shared PyTorch traces beside the repository" >&2
  exit 1
fi
# lavapipe warns on stderr when this is unset; give it a private one.
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"

cargo test --workspace
cargo build -p vrampool --target wasm32-unknown-unknown
cargo build -p vrampool-web --target wasm32-unknown-unknown
