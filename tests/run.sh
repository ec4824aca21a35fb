#!/usr/bin/env bash
# The whole test suite, as a new user and CI run it: installs dependencies, builds driftd twice
# (release with debug info, and ASan+UBSan), and runs the ctest tests: every one in the first,
# and in the second all but those listed below (each heavy test runs once, in the build where it
# means something). The sanitizer build compiles in the background, at the lowest priority,
# while the release tests run (they leave most of the cores idle). The Kafka tests start their
# own broker (tests/kafka/broker.sh) through a ctest fixture. The fuzz harnesses replay their
# corpus as tests in both builds; fuzzing them (tests/fuzz/run.sh, clang) is opt-in.
#   bash tests/run.sh              everything
#   DRIFTD_BUILDS=release bash tests/run.sh     only the normal build
#   DRIFTD_FUZZ_SECONDS=30 bash tests/run.sh     and then each fuzz harness for 30 s
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

# Everything the tests need, not only what building the daemon needs.
bash deploy/setup-debian.sh --test
# The Kafka broker is started (and its jars resolved on first use) by the ctest fixture.

# River (PyPI) for the drift-quality comparison (tests/bench/drift_quality_river.py), in a venv
# of its own; without it that one test is skipped, nothing else changes.
venv="$root/build-test-venv"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import river" 2>/dev/null; then
  if python3 -m venv "$venv" && "$venv/bin/pip" install -q river; then
    echo "=== river installed in $venv"
  else
    echo "=== warning: could not install river from PyPI; its comparison test will be skipped" >&2
  fi
fi
[ -x "$venv/bin/python" ] && export DRIFTD_PYTHON="$venv/bin/python"

builds=${DRIFTD_BUILDS:-"release sanitize"}
jobs=${DRIFTD_JOBS:-$(nproc)}
status=0
# settings BUILD: the build's CMake flags (`flags`) and the ctest selection of its tests
# (`selection`).
settings() {
  case "$1" in
    # Line tables only (-g1), as below: the code is the same as with -g (debug information
    # never changes it, so the benchmarks measure what a -g build runs), and a file of the
    # executor compiles in 11 s rather than 17 s.
    release) flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG")
             selection=() ;;
    # The sanitizer pass leaves out, one ctest regex a line (add a line for another):
    # - the container image test (it builds driftd inside the image) and the ops tests (they
    #   drive Chromium, Prometheus, Alertmanager and podman): under the sanitizers they test
    #   nothing new;
    # - heavy tests that run out of time under ASan while the release build runs them and a unit
    #   test covers their code in both builds: the 2M-row windowed run through the daemon
    #   (tests/engine/aggregation_window_test.cc runs 10M rows through the Aggregator), and the
    #   scale-out tests (each runs the daemon 3 to 9 times over 80k-1M records against the
    #   broker; the executor's unit tests run its event clock and row blocks in both
    #   builds);
    # - the false-alarm tests over millions of stationary values (8 models x 8 features, and
    #   8 models' categorical and data-quality series):
    #   they measure the detectors' calibration, which the sanitizers cannot change, and the
    #   shorter drift tests run the same code in both builds;
    # - the Kafka tests that spend their time waiting on the broker (its outages) or on 20+
    #   daemon restarts: their code paths run under the sanitizers in the shorter Kafka tests;
    # - the other tests that restart the daemon 20+ times (SIGKILL loops, the 200 starts of the
    #   start-up test) or hold it 25 s in a commit: each runs once, in the normal build; the
    #   sanitizers see the same recovery code in the shorter crash and restart tests.
    # - the detectors' calibration tests (their false-alarm rates over millions of values),
    #   the 1M-value quantile accuracy and the long windowed state bound: statistics and sizes
    #   the sanitizers cannot change; shorter tests run the same code in both builds;
    # - the tests of one process against scaled-out ones (9 daemons each), the 75 s
    #   two-and-three-threads comparison (the shorter thread tests run its lanes), the
    #   secrets test (40 s of waiting on a broker that is down) and the second-daemon fencing
    #   test;
    # - three one-thread batching comparisons (40+ s each under ASan: the same executor run
    #   again and again with other batch sizes and read orders; the two-thread one, the
    #   restart and segment ones still run here) and the two 0.5 sigma detection tests (30-40 s:
    #   what they measure is detection, and the shorter drift tests run the same code).
    # Nor does it build the container image and ops tests (DRIFTD_OPS_TESTS=OFF).
    # Line tables only (-g1): a sanitizer report still names function, file and line, and the
    # build links in far less time than with full debug information.
    sanitize) flags=(-DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DDRIFTD_SANITIZE=ON
                     -DDRIFTD_BUILD_BENCHMARKS=OFF -DDRIFTD_OPS_TESTS=OFF)
              skip=(
                '^(docker|ops):'
                '^e2e:a long windowed run keeps its state bounded and emits every closed window once$'
                '^kafka:scale-out'
                '^engine:stationary streams of 8 models x 8 features x 1M records raise no alert$'
                '^engine:stationary categorical streams of 8 models x 1M records raise no alert$'
                '^e2e:stationary inference logs of 8 models x 8 features raise no alert line at all$'
                '^kafka:.*broker outage'
                '^kafka:.*labels on their own topic'
                '^service:a million distinct model ids'
                '^e2e:.*20\+ (SIGKILLs|times)'
                '^kafka:.*(20\+ SIGKILLs|SIGKILL 20\+ times|held 25 s)'
                '^service:a pipeline that does not load exits with 78 at once'
                '^engine:.*(level is|level holds|levels follow|levels are their|level includes|per-value rate includes)'
                '^engine:quantiles of 1M values'
                '^engine:state of a long windowed run stays bounded'
                '^kafka:one process and scaled-out processes'
                "^kafka:drift's record-count windows over partitions give one process's alerts scaled out"
                '^executor:batches on two and three threads'
                '^service:no secret is logged or served'
                '^kafka:a second daemon on the same pipeline'
                '^executor:the same partitioned input gives the same alerts and window statistics whatever'
                '^executor:approx_percentile windows are identical whatever maxOffsetsPerTrigger'
                '^executor:categorical and data-quality alerts are the same whatever the batching'
                '^(e2e|engine):a 0\.5 sigma (shift|mean shift) on one feature'
              )
              selection=(-E "$(IFS='|'; echo "${skip[*]}")") ;;
    *) echo "unknown build '$1'" >&2; exit 64 ;;
  esac
}
# compile BUILD: configures and builds it in build-test-BUILD.
compile() {
  local build=$1
  settings "$build"
  cmake -S "$root" -B "$root/build-test-$build" -G Ninja "${flags[@]}" >/dev/null
  cmake --build "$root/build-test-$build" -j "$jobs"
}
read -r -a build_list <<< "$builds"
for build in "${build_list[@]}"; do settings "$build"; done  # an unknown build fails first

# A build after the first compiles in the background while the tests of the one before it
# run, at the lowest priority: those tests leave more than half of the cores idle (most of
# their time is the Kafka tests' waits on the broker, on group sessions and on restarts), and
# at nice 19 the compiler takes only what they leave. Its output is shown once it is waited
# for.
background_pid=
for i in "${!build_list[@]}"; do
  build=${build_list[$i]}
  dir="$root/build-test-$build"
  if [ -n "$background_pid" ]; then
    previous=${build_list[$((i - 1))]}
    if ! wait "$background_pid"; then
      cat "$dir/build.log"
      echo "=== $build build failed (compiled beside the $previous tests)" >&2
      exit 1
    fi
    background_pid=
    tail -n 3 "$dir/build.log"
    echo "=== $build build done at ${SECONDS}s (compiled beside the $previous tests)"
  else
    echo "=== $build build ($dir) at ${SECONDS}s"
    compile "$build"
  fi
  settings "$build"
  next=${build_list[$((i + 1))]:-}
  if [ -n "$next" ]; then
    echo "=== $next build ($root/build-test-$next) at ${SECONDS}s, in the background, nice 19"
    mkdir -p "$root/build-test-$next"
    nice -n 19 bash -c "set -euo pipefail; $(declare -f settings compile); root='$root' \
      jobs='$jobs'; compile $next" >"$root/build-test-$next/build.log" 2>&1 &
    background_pid=$!
  fi
  echo "=== $build tests at ${SECONDS}s"
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  export DRIFTD_BUILD_KIND=$build
  # The container image builds in the background beside the release tests, at a lower
  # priority, so that it takes the cores the tests leave. Its fixture and the test that runs
  # the image come after the other tests, once that build is done: started among them, the
  # fixture's wait for the build would hold one of ctest's slots for minutes.
  image_build=
  image_tests='^docker: ?the container image'
  if [ "$build" = release ] && bash "$root/tests/docker/podman_image.sh" check >/dev/null 2>&1; then
    nice -n 10 bash "$root/tests/docker/podman_image.sh" build >"$dir/image-build.log" 2>&1 &
    image_build=$!
    selection=(-E "$image_tests")
  fi
  # A test that fails is run once more: one that then passes does not fail the run, but it is
  # listed at the end (with every other failure), where a reader of the log's tail sees it.
  if ! ctest --test-dir "$dir" --output-on-failure --timeout 900 -j "$jobs" \
      --repeat until-pass:2 "${selection[@]}" 2>&1 | tee "$dir/ctest.log"; then
    status=1
  fi
  if [ -n "$image_build" ]; then
    # The fixture builds the image again if this build failed, and so reports why.
    wait "$image_build" || echo "=== the background image build failed (see $dir/image-build.log)"
    echo "=== container image tests at ${SECONDS}s"
    if ! ctest --test-dir "$dir" --output-on-failure --timeout 900 -j "$jobs" \
        --repeat until-pass:2 -R "$image_tests" 2>&1 | tee -a "$dir/ctest.log"; then
      status=1
    fi
  fi
done
for build in $builds; do
  log="$root/build-test-$build/ctest.log"
  [ -f "$log" ] || continue
  failed=$(grep -E 'Test +#[0-9]+: .*\*\*\*(Failed|Timeout|Exception)' "$log" || true)
  if [ -n "$failed" ]; then
    # Each failure's first assertions (Catch2's "file:line: FAILED:" and the lines after it),
    # cut short, so the reason is at the log's end too, not only the test's name.
    echo "=== $build: where they failed (the first assertions of each failed run, lines cut at 200):"
    awk -v cut=200 '
      function close_block() {  # a failure without an assertion (a crash, a timeout): its tail
        if (in_failed && shown == 0) for (i = n - 5; i < n; ++i) if (i >= 0) print "    " tail[i % 5]
      }
      /^ *Start +[0-9]+:|^ *([0-9]+\/[0-9]+ )?Test +#[0-9]+:/ {
        close_block()
        in_failed = ($0 ~ /\*\*\*(Failed|Timeout|Exception)/); shown = 0; after = 0; n = 0
        if (in_failed) print substr($0, 1, cut)
        next
      }
      !in_failed { next }
      { tail[n % 5] = substr($0, 1, cut); ++n }
      / FAILED:$/ && shown < 4 { ++shown; after = 5 }
      after > 0 { print "    " substr($0, 1, cut); --after }
      END { close_block() }' "$log"
    echo "=== $build: tests that failed at least once (a later 'Passed' line above means on their retry):"
    echo "$failed"
  fi
done
# Fuzzing (tests/fuzz/run.sh: a clang build of its own, then each harness from its corpus for
# DRIFTD_FUZZ_SECONDS): opt-in, as it needs a third build, with clang; the corpus replays ran
# above in both builds.
fuzz_seconds=${DRIFTD_FUZZ_SECONDS:-0}
if [ "$fuzz_seconds" != 0 ]; then
  echo "=== fuzz at ${SECONDS}s"
  if ! DRIFTD_FUZZ_SECONDS=$fuzz_seconds DRIFTD_JOBS=$jobs bash "$root/tests/fuzz/run.sh"; then
    status=1
  fi
fi
echo "=== done at ${SECONDS}s: $([ $status = 0 ] && echo passed || echo FAILED)"
exit $status
