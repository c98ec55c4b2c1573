#!/usr/bin/env bash
# The two set-up commands of README.md:
#   ./tuneforge.sh demo   install what is missing, build, tune matmul 512^3 (200 trials)
#                         on the embedded default (in-process server, one local agent,
#                         SQLite file tuneforge.db)
#   ./tuneforge.sh test   install what is missing, build, run the whole test suite
# Also: ./tuneforge.sh build (install + build only).
set -euo pipefail
cd "$(dirname "$0")"

BUILD_DIR=${BUILD_DIR:-build}
JOBS=$(nproc)

# build [TARGET...]: every target by default; the demo builds only what it runs and
# installs only what that needs (no Python: the tests' reference outputs need it).
build() {
  if [ $# -gt 0 ]; then
    scripts/install-deps --demo
  else
    scripts/install-deps
    scripts/install-python-deps
  fi
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release \
    -DTUNEFORGE_PYTHON="$PWD/${TUNEFORGE_VENV:-.venv}/bin/python" >/dev/null
  if [ $# -gt 0 ]; then
    cmake --build "$BUILD_DIR" -j"$JOBS" --target "$@"
  else
    cmake --build "$BUILD_DIR" -j"$JOBS"
  fi
}

case "${1:-}" in
  demo)
    # The CLI (with the embedded server) and the agent it starts; no tests.
    build tuneforge tuneforge-agent
    exec "$BUILD_DIR/bin/tuneforge" tune --task "matmul M=512 N=512 K=512" --trials 200 \
      --db tuneforge.db
    ;;
  test)
    build
    # The fuzz build (clang, sanitizers; tests/fuzz/): its libFuzzer targets run in the
    # suite as fuzz_smoke_<name>, 30 s each.
    FUZZ_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
    CC=clang CXX=clang++ cmake -S . -B "$FUZZ_DIR" -DCMAKE_BUILD_TYPE=Release -DTUNEFORGE_FUZZ=ON >/dev/null
    cmake --build "$FUZZ_DIR" -j"$JOBS" --target fuzz_targets
    cmake -S . -B "$BUILD_DIR" -DTF_FUZZ_BINARY_DIR="$PWD/$FUZZ_DIR" >/dev/null
    cd "$BUILD_DIR"
    exec ctest --output-on-failure -j"$JOBS"
    ;;
  build)
    build
    ;;
  *)
    echo "usage: $0 demo | test | build" >&2
    exit 2
    ;;
esac
