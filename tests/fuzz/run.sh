#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz (clang-14, ASan + UBSan, in build-fuzz/) and
# runs each for a bounded time, starting from its checked-in corpus (tests/fuzz/corpus/<name>/,
# which holds every input that once broke something, so they are re-run first). Fails when a
# harness crashes, leaks, exceeds its memory or takes too long on one input; the input that did
# it is kept in build-fuzz/artifacts/ and printed.
#   bash tests/fuzz/run.sh                          every harness, 60 s each
#   DRIFTD_FUZZ_SECONDS=600 bash tests/fuzz/run.sh config    one harness, longer
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
seconds=${DRIFTD_FUZZ_SECONDS:-60}
jobs=${DRIFTD_JOBS:-$(nproc)}
dir=${DRIFTD_FUZZ_BUILD:-$root/build-fuzz}
harnesses=("$@")
if ((${#harnesses[@]} == 0)); then harnesses=(json_decoder config reference state_codecs expr); fi

if ! command -v clang++-14 >/dev/null; then
  echo "fuzz: clang++-14 is missing (bash deploy/setup-debian.sh --test installs it)" >&2
  exit 1
fi
# Only the libraries the harnesses link are built (no daemon, tests or benchmarks), at -O1 with
# line tables only: quicker to compile than -O2 -g, and a report still names file and line.
# Assertions stay on.
cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -gline-tables-only" \
  -DCMAKE_CXX_COMPILER=clang++-14 -DDRIFTD_FUZZ=ON -DDRIFTD_BUILD_TESTS=OFF \
  -DDRIFTD_BUILD_BENCHMARKS=OFF >/dev/null
targets=()
for harness in "${harnesses[@]}"; do targets+=("fuzz_$harness"); done
cmake --build "$dir" -j "$jobs" --target "${targets[@]}"

artifacts="$dir/artifacts"
mkdir -p "$artifacts"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
for harness in "${harnesses[@]}"; do
  # The corpus grows in a scratch copy; the checked-in one is only read.
  work=$(mktemp -d "${TMPDIR:-/tmp}/driftd-fuzz-$harness-XXXXXX")
  if [ -d "$root/tests/fuzz/corpus/$harness" ]; then
    cp -r "$root/tests/fuzz/corpus/$harness/." "$work/"
  fi
  dict=()
  if [ -f "$root/tests/fuzz/$harness.dict" ]; then dict=("-dict=$root/tests/fuzz/$harness.dict"); fi
  echo "=== fuzz $harness: ${seconds} s from $(find "$work" -type f | wc -l) corpus inputs"
  log="$artifacts/$harness.log"
  if "$dir/tests/fuzz/fuzz_$harness" "${dict[@]}" -max_total_time="$seconds" -timeout=10 \
      -rss_limit_mb=2048 -malloc_limit_mb=1024 -max_len=131072 -print_final_stats=1 \
      -artifact_prefix="$artifacts/$harness-" "$work" >"$log" 2>&1; then
    grep -E "^stat::number_of_executed_units|^#[0-9]+.*DONE" "$log" | tail -2 || true
  else
    status=1
    echo "fuzz $harness FAILED; the end of its log ($log):" >&2
    tail -40 "$log" >&2
    for input in "$artifacts/$harness-"*; do
      [ -f "$input" ] || continue
      echo "input $input (run again: $dir/tests/fuzz/fuzz_$harness $input):" >&2
      od -c "$input" | head -20 >&2
    done
  fi
  rm -rf "$work"
done
exit $status
