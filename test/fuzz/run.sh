#!/usr/bin/env bash
# Fuzzes parse + engine (test/fuzz/engine_fuzz.cpp) for SECONDS (default 3600), building
# the harness with clang in build-fuzz/ first if needed.
#
#   test/fuzz/run.sh [SECONDS] [libFuzzer options...]   e.g. run.sh 28800 -fork=2
#   test/fuzz/run.sh --ci [SECONDS]                     what test/run-all.sh runs (60 s)
#
# Long runs keep what they learn in build-fuzz/corpus (seeded from test/fuzz/corpus); --ci
# starts from the seeds alone in a scratch directory, so its budget covers the same ground
# every time, and also checks that the committed seeds are what make_corpus.cpp writes.
# A crash, an ASan/UBSan report, a broken invariant or a unit slower than 10 s fails the
# run; the input is saved in build-fuzz/artifacts/ (replay: build-fuzz/engine_fuzz FILE,
# with ENGINE_FUZZ_TRACE=1 for one line per packet).
set -euo pipefail
cd "$(dirname "$0")/../.."

ci=0
if [[ ${1:-} == --ci ]]; then
  ci=1
  shift
fi
seconds=${1:-$((ci ? 60 : 3600))}
shift || true
build=${RSFC_FUZZ_BUILD_DIR:-build-fuzz}
seeds=test/fuzz/corpus

if [[ ! -f $build/build.ninja ]]; then
  command -v clang++ >/dev/null || { echo "fuzz: clang++ missing (./setup.sh)" >&2; exit 1; }
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER=clang++ -DRSFC_FUZZ=ON >/dev/null
fi
cmake --build "$build" -j2 --target engine_fuzz rsfc-fuzz-corpus

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
if ((ci)); then
  mkdir "$scratch/seeds"
  "$build/rsfc-fuzz-corpus" "$scratch/seeds"
  diff -r "$scratch/seeds" "$seeds" >/dev/null || {
    echo "fuzz: $seeds differs from what make_corpus.cpp writes: regenerate it with" >&2
    echo "      $build/rsfc-fuzz-corpus $seeds" >&2
    exit 1
  }
  corpus=$scratch/work
else
  corpus=$build/corpus
fi
mkdir -p "$corpus" "$build/artifacts"

echo "== fuzz: engine_fuzz for ${seconds} s (corpus $corpus, seeds $seeds) =="
set +e
"$build/engine_fuzz" -max_total_time="$seconds" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$build/artifacts/" "$@" "$corpus" "$seeds" \
  >"$scratch/log" 2>&1
rc=$?
set -e
grep -E '^#[0-9]+[[:space:]]+(INITED|DONE)|^stat::(number_of_executed_units|average_exec_per_sec|new_units_added)' \
  "$scratch/log" || true
if ((rc != 0)); then
  tail -n 60 "$scratch/log" >&2
  echo "fuzz: FAILED (exit $rc); the input is in $build/artifacts/" >&2
  exit "$rc"
fi
echo "fuzz: clean for ${seconds} s"
