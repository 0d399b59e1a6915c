#!/usr/bin/env bash
# The test command (README and .ci/run both call this): installs what the tests need, then runs them.
# torch is pinned to the local CPU build (requirements.txt); a range would download several GB of CUDA wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q -r requirements-dev.txt
# Browser tests drive Debian's chromium (browser downloads are blocked here); without it they skip with a reason.
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
      || echo "warning: could not install chromium; browser tests will be skipped"
  fi
fi
# Ray too (requirements-ray.txt, optional for users): its tests (tests/test_bench_ray.py, marked `ray`) start a real
# two-node cluster on this machine and are part of CI (about 4 minutes on 2 cores); `-m "not ray"` leaves them out.
python3 -m pip install -q -r requirements-ray.txt \
  || echo "warning: could not install Ray (requirements-ray.txt); the Ray cluster tests will be skipped"
export KFORGE_CACHE_DIR="${KFORGE_CACHE_DIR:-$(mktemp -d)/kforge-cache}"
exec python3 -m pytest -q "$@"
