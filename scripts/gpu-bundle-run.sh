#!/usr/bin/env bash
# The GPU checks, run from the bundle that scripts/gpu-bundle.sh builds
# (this file is its run.sh): on a GPU machine, with no Rust toolchain.
#
#   .gpu-bundle/run.sh [STEP...]
#
# STEP is one or more of
#   tests      every GPU integration test binary, each in its own process
#   sanitizer  the GPU tests under compute-sanitizer's memcheck (not
#              gpu_fault and gpu_libraries, whose faults and fakes are
#              their point)
#   demo       the demonstration: batched_gemm, batch of 256, 256^3, 16 threads
#   bench      the GPU criterion benchmarks
#   scaling    the CPU benchmark report (bench_report) at 1, 2, 4, 8, 16 threads
#   gpu        tests, sanitizer, demo and bench
#   all        everything (the default)
# so that a session with a 10-minute limit per command can split the work,
# e.g. `run.sh tests sanitizer`, `run.sh demo bench`, `run.sh scaling`.
#
# Without a GPU (no libcuda, or no working nvidia-smi) the tests run
# without SELVEDGE_REQUIRE_GPU (they say they skipped and pass), every
# other step is skipped, a line with `SKIPPED: no GPU` is printed and the
# exit status is 0; setting SELVEDGE_REQUIRE_GPU=1 beforehand makes a
# missing GPU fail instead. With a GPU, SELVEDGE_REQUIRE_GPU=1 is set, so
# a GPU the crate cannot open fails the tests rather than skipping them.
#
# Ends with one Markdown summary: the bundle's commit, every step's result
# and duration, the demonstration's timings, the benchmarks' medians and
# the scaling table. Exits non-zero if a step failed. The summary
# (summary.md, the last call's, and summary-<UTC time>.md, one per call,
# kept), logs, criterion's data and the scaling reports go to
# GPU_BUNDLE_OUT (default: out/ in the bundle); `bench_report --markdown
# --gpu-machine` makes the summaries a section of BENCHMARKS.md.
#
# Settings (environment):
#   SELVEDGE_CUBLAS           an explicit cuBLAS (libcublas.so.N) to use
#   GPU_BUNDLE_OUT            where logs and results go
#   GPU_BUNDLE_THREADS        worker threads for the demo and benches (16)
#   GPU_BUNDLE_TEST_ARGS      extra test harness arguments (a filter, ...)
#   GPU_BUNDLE_BENCH_ARGS     extra criterion arguments (a filter, times)
#   GPU_BUNDLE_SCALING_THREADS  thread counts for `scaling` ("1 2 4 8 16")
#   GPU_BUNDLE_SCALING_SAMPLES  bench_report's --samples for `scaling` (5)
#   GPU_BUNDLE_BUDGET_S       the run's time budget in seconds (540): a step
#                             starts only if enough is left, and is cut short
#                             (a failure) if it runs past it; steps left out
#                             are listed as `not run`, with the command to
#                             run them
set -uo pipefail

bundle=$(cd "$(dirname "$0")" && pwd)
self="$bundle/$(basename "$0")"
cd "$bundle" || exit 1
export RUST_BACKTRACE=1
threads="${GPU_BUNDLE_THREADS:-16}"
scaling_threads="${GPU_BUNDLE_SCALING_THREADS:-1 2 4 8 16}"
scaling_samples="${GPU_BUNDLE_SCALING_SAMPLES:-5}"
# Per-process limits (cut to what is left of the budget): a hang becomes a
# failure that says so.
test_limit=300
step_limit=540

# ---------------------------------------------------------------- steps
want_tests=0 want_sanitizer=0 want_demo=0 want_bench=0 want_scaling=0
[ "$#" -eq 0 ] && set -- all
for arg in "$@"; do
  case "$arg" in
    tests) want_tests=1 ;;
    sanitizer) want_sanitizer=1 ;;
    demo) want_demo=1 ;;
    bench) want_bench=1 ;;
    scaling) want_scaling=1 ;;
    gpu) want_tests=1 want_sanitizer=1 want_demo=1 want_bench=1 ;;
    all) want_tests=1 want_sanitizer=1 want_demo=1 want_bench=1 want_scaling=1 ;;
    -h | --help)
      sed -n '2,/^set -uo/p' "$self" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "run.sh: unknown step \`$arg\` (tests, sanitizer, demo, bench, scaling, gpu, all)" >&2
      exit 2
      ;;
  esac
done

out="${GPU_BUNDLE_OUT:-$bundle/out}"
if ! mkdir -p "$out" 2>/dev/null || [ ! -w "$out" ]; then
  out=$(mktemp -d "${TMPDIR:-/tmp}/selvedge-gpu-bundle.XXXXXX")
fi
out=$(cd "$out" && pwd)

section() { printf '\n=== %s\n' "$*"; }

# Durations: milliseconds since the epoch, and seconds between two.
now_ms() { date +%s%3N; }
secs_since() { awk -v a="$1" -v b="$(now_ms)" 'BEGIN { printf "%.1f", (b - a) / 1000 }'; }

# The run's time budget: a step starts only with enough of it left, and
# every process's time limit is cut to what is left, so that one call of
# run.sh ends within the budget (a GPU session allows 10 minutes a command).
run_start=$(now_ms)
budget="${GPU_BUNDLE_BUDGET_S:-540}"
elapsed_s() { echo $((($(now_ms) - run_start) / 1000)); }
limit() { # seconds: that, or what is left of the budget if less
  local left=$((budget - $(elapsed_s)))
  if [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}
not_run=()
has_time() { # name step seconds: whether that much of the budget is left
  local e
  e=$(elapsed_s)
  [ $((budget - e)) -ge "$3" ] && return 0
  record "$1" "not run" 0 "out of time (${e} s of the run's ${budget} s gone): \`run.sh $2\`"
  case " ${not_run[*]-} " in *" $2 "*) ;; *) not_run+=("$2") ;; esac
  return 1
}

# The summary's rows: name, result, seconds, note.
rows=()
failed=0
record() { # name result seconds note
  rows+=("| $1 | $2 | $3 s | $4 |")
  [ "$2" = FAIL ] && failed=1
  return 0
}

# run_logged LOG LIMIT CMD...: runs CMD under `timeout`, its output both
# shown and saved in LOG; returns its exit status (124: timed out).
run_logged() {
  local log=$1 limit=$2
  shift 2
  echo "\$ $*"
  timeout -k 10 "$limit" "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "run.sh: TIMED OUT after ${limit} s: $*" | tee -a "$log"
  fi
  return "$rc"
}

# result_of RC [LIMIT]: PASS, FAIL, or FAIL with the timeout said.
note_of() { # rc limit
  case "$1" in
    0) echo "" ;;
    124 | 137) echo "timed out after $2 s" ;;
    *) echo "exit status $1" ;;
  esac
}

# ---------------------------------------------------------------- machine
section "machine"
[ -f MANIFEST ] && sed 's/^/bundle: /' MANIFEST
echo "host: $(uname -srm), $(nproc) cores, $(ldd --version 2>/dev/null | head -n 1)"
smi_ok=0
if command -v nvidia-smi >/dev/null 2>&1; then
  if nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; then
    nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && smi_ok=1
  else
    echo "nvidia-smi failed"
  fi
else
  echo "nvidia-smi: not found"
fi

prepend_ld_path() { # dir: put it first on LD_LIBRARY_PATH unless it is there
  case ":${LD_LIBRARY_PATH:-}:" in
    *":$1:"*) ;;
    *) export LD_LIBRARY_PATH="$1${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;;
  esac
}

# libcuda: what the loader knows, else the usual driver directories.
ldconfig_p() {
  local ldc
  ldc=$(command -v ldconfig || echo /sbin/ldconfig)
  [ -x "$ldc" ] && "$ldc" -p 2>/dev/null
}
libcuda=""
libcuda=$(ldconfig_p | awk '$1 == "libcuda.so.1" { print $NF; exit }')
if [ -z "$libcuda" ]; then
  IFS=: read -r -a ld_dirs <<<"${LD_LIBRARY_PATH:-}"
  for d in "${ld_dirs[@]}" /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu \
    /usr/lib64 /usr/lib /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/wsl/lib; do
    [ -n "$d" ] || continue
    for f in "$d/libcuda.so.1" "$d/libcuda.so"; do
      if [ -e "$f" ]; then
        libcuda=$f
        break 2
      fi
    done
  done
  if [ -n "$libcuda" ]; then
    prepend_ld_path "$(dirname "$libcuda")"
  fi
fi
echo "libcuda: ${libcuda:-not found}"

# cuBLAS: SELVEDGE_CUBLAS, else a Python wheel (nvidia-cublas-cu12 puts it
# in nvidia/cublas/lib, the CUDA 13 wheels in nvidia/cu13/lib), else a
# CUDA toolkit or the loader's cache. Of several, the highest version.
pick_cublas() { # candidate paths on stdin -> the highest major, shortest name
  awk '{
    f = $0; n = f; sub(/.*\/libcublas\.so\.?/, "", n); split(n, v, ".");
    printf "%09d %04d %s\n", v[1] + 0, length(f), f
  }' | sort -k1,1nr -k2,2n | awk 'NR == 1 { print $3 }'
}
site_dirs() {
  local d
  for d in /usr/local/lib/python3*/site-packages /usr/local/lib/python3*/dist-packages \
    /usr/local/lib64/python3*/site-packages /usr/lib/python3*/site-packages \
    /usr/lib/python3*/dist-packages /usr/lib64/python3*/site-packages \
    /opt/conda/lib/python3*/site-packages /opt/conda/envs/*/lib/python3*/site-packages \
    ${VIRTUAL_ENV:+"$VIRTUAL_ENV"/lib/python3*/site-packages} \
    ${CONDA_PREFIX:+"$CONDA_PREFIX"/lib/python3*/site-packages} \
    "$HOME"/.local/lib/python3*/site-packages; do
    [ -d "$d" ] && echo "$d"
  done
  if command -v python3 >/dev/null 2>&1; then
    python3 - <<'EOF' 2>/dev/null
import site, sys
dirs = list(sys.path)
try:
    dirs += site.getsitepackages() + [site.getusersitepackages()]
except Exception:
    pass
try:
    import nvidia.cublas
    for p in nvidia.cublas.__path__:
        print(p + "/../..")
except Exception:
    pass
for d in dirs:
    if d:
        print(d)
EOF
  fi
}
cublas="" cublas_from=""
if [ -n "${SELVEDGE_CUBLAS:-}" ]; then
  if [ -e "$SELVEDGE_CUBLAS" ]; then
    cublas=$SELVEDGE_CUBLAS cublas_from="SELVEDGE_CUBLAS"
  else
    echo "SELVEDGE_CUBLAS=$SELVEDGE_CUBLAS does not exist: searching instead"
    unset SELVEDGE_CUBLAS
  fi
fi
if [ -z "$cublas" ]; then
  cublas=$(site_dirs | sort -u | while read -r d; do
    for f in "$d"/nvidia/cublas/lib/libcublas.so.[0-9]* "$d"/nvidia/cu[0-9]*/lib/libcublas.so.[0-9]*; do
      [ -e "$f" ] && echo "$f"
    done
  done | pick_cublas)
  [ -n "$cublas" ] && cublas_from="a Python wheel"
fi
if [ -z "$cublas" ]; then
  cublas=$(
    for d in ${CUDA_HOME:+"$CUDA_HOME"/lib64} ${CUDA_PATH:+"$CUDA_PATH"/lib64} \
      /usr/local/cuda/lib64 /usr/local/cuda-*/lib64 /usr/local/cuda*/targets/*/lib; do
      for f in "$d"/libcublas.so.[0-9]*; do
        [ -e "$f" ] && echo "$f"
      done
    done
    ldconfig_p | awk '$1 ~ /^libcublas\.so\.[0-9]/ { print $NF }'
  )
  cublas=$(printf '%s\n' "$cublas" | grep . | pick_cublas)
  [ -n "$cublas" ] && cublas_from="a CUDA toolkit"
fi
if [ -n "$cublas" ]; then
  cublas_dir=$(cd "$(dirname "$cublas")" && pwd)
  export SELVEDGE_CUBLAS="$cublas"
  # Its directory on the loader path, for libcublasLt beside it.
  prepend_ld_path "$cublas_dir"
  # A wheel has only the versioned name (libcublas.so.13); a loader that
  # asks for plain libcublas.so finds it through this link.
  if [ ! -e "$cublas_dir/libcublas.so" ]; then
    mkdir -p "$out/lib"
    ln -sf "$cublas" "$out/lib/libcublas.so"
    prepend_ld_path "$out/lib"
  fi
  echo "cuBLAS: $cublas (from $cublas_from)"
else
  echo "cuBLAS: not found"
fi
echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"

sanitizer=""
for f in "$(command -v compute-sanitizer 2>/dev/null)" \
  ${CUDA_HOME:+"$CUDA_HOME"/bin/compute-sanitizer} /usr/local/cuda/bin/compute-sanitizer \
  /usr/local/cuda*/bin/compute-sanitizer /opt/nvidia/*/compute-sanitizer/compute-sanitizer; do
  if [ -n "$f" ] && [ -x "$f" ]; then
    sanitizer=$f
    break
  fi
done
echo "compute-sanitizer: ${sanitizer:-not found}"

gpu=1 why=""
if [ -z "$libcuda" ]; then
  gpu=0 why="no libcuda"
elif [ "$smi_ok" -ne 1 ]; then
  gpu=0 why="nvidia-smi is missing or lists no GPU"
fi
if [ "$gpu" -eq 0 ] && [ "${SELVEDGE_REQUIRE_GPU:-}" = 1 ]; then
  echo "no GPU found ($why), but SELVEDGE_REQUIRE_GPU=1: running the GPU checks anyway"
  gpu=1
fi
if [ "$gpu" -eq 1 ]; then
  export SELVEDGE_REQUIRE_GPU=1
  echo "mode: GPU (SELVEDGE_REQUIRE_GPU=1)"
else
  unset SELVEDGE_REQUIRE_GPU
  echo "mode: no GPU ($why): the tests run and say they skipped; nothing else runs"
fi
echo "worker threads (demo, benches): $threads; results in $out"
export SELVEDGE_BENCH_THREADS="$threads"

no_gpu_skip() { # name
  record "$1" skipped 0 "no GPU"
}

# ---------------------------------------------------------------- tests
if [ "$want_tests" -eq 1 ]; then
  section "GPU tests"
  found=0
  for bin in tests/*; do
    [ -x "$bin" ] || continue
    found=1
    name=$(basename "$bin")
    has_time "test $name" tests 30 || continue
    lim=$(limit "$test_limit")
    start=$(now_ms)
    # Each binary is a process of its own: gpu_fault's deliberate device
    # error ruins its process's CUDA context and nothing else. With a GPU
    # the tests run in parallel, as `cargo test` runs them, their output
    # captured: the harness prints each failing test's output at the end,
    # whole. Without one they run in turn, uncaptured, so that each says
    # in order that it skipped.
    if [ "$gpu" -eq 1 ]; then harness=(); else harness=(--test-threads=1 --nocapture); fi
    # shellcheck disable=SC2086 # GPU_BUNDLE_TEST_ARGS is a list of words
    run_logged "$out/test-$name.log" "$lim" "./$bin" "${harness[@]}" ${GPU_BUNDLE_TEST_ARGS:-}
    rc=$?
    t=$(secs_since "$start")
    counts=$(grep -E '^test result:' "$out/test-$name.log" | tail -n 1 | sed -E 's/^test result: [A-Za-z]+\. //; s/; finished.*//; s/; 0 (ignored|measured|filtered out)//g')
    if [ "$rc" -eq 0 ]; then
      if [ "$gpu" -eq 1 ]; then
        record "test $name" pass "$t" "$counts"
      else
        record "test $name" pass "$t" "without a GPU: $(grep -c ': skipped' "$out/test-$name.log") skipped"
      fi
    else
      record "test $name" FAIL "$t" "$(note_of "$rc" "$lim")${counts:+; $counts}"
    fi
  done
  [ "$found" -eq 1 ] || record "tests" FAIL 0 "no test binaries in $bundle/tests"
fi

# ---------------------------------------------------------------- sanitizer
if [ "$want_sanitizer" -eq 1 ]; then
  if [ "$gpu" -eq 0 ]; then
    no_gpu_skip "compute-sanitizer memcheck"
  elif [ -z "$sanitizer" ]; then
    section "compute-sanitizer"
    echo "compute-sanitizer not found: skipped"
    record "compute-sanitizer memcheck" skipped 0 "compute-sanitizer not found"
  else
    # Every test binary but gpu_fault, whose deliberate fault is what
    # memcheck reports, and gpu_libraries, whose fake drivers and cuBLAS
    # libraries stand in for the ones memcheck intercepts (their children
    # crash under it). Stream-ordered races (a buffer freed on one stream
    # while another still reads it) where this compute-sanitizer can
    # track them.
    races=()
    if "$sanitizer" --help 2>/dev/null | grep -q -- '--track-stream-ordered-races'; then
      races=(--track-stream-ordered-races all)
    fi
    for bin in tests/*; do
      [ -x "$bin" ] || continue
      name=$(basename "$bin")
      case "$name" in gpu_fault | gpu_libraries) continue ;; esac
      has_time "compute-sanitizer memcheck: $name" sanitizer 60 || continue
      section "compute-sanitizer memcheck: tests/$name"
      lim=$(limit "$step_limit")
      start=$(now_ms)
      run_logged "$out/sanitizer-$name.log" "$lim" "$sanitizer" --tool memcheck "${races[@]}" \
        --error-exitcode 86 --print-limit 100 "./$bin" --test-threads=1
      rc=$?
      t=$(secs_since "$start")
      summary=$(grep -E 'ERROR SUMMARY' "$out/sanitizer-$name.log" | tail -n 1 | sed 's/^=* *//')
      case "$rc" in
        0) record "memcheck $name" pass "$t" "${summary:-no summary}" ;;
        86) record "memcheck $name" FAIL "$t" "${summary:-memcheck errors}" ;;
        *) record "memcheck $name" FAIL "$t" "$(note_of "$rc" "$lim")${summary:+; $summary}" ;;
      esac
    done
  fi
fi

# ---------------------------------------------------------------- demo
demo_lines=""
if [ "$want_demo" -eq 1 ]; then
  if [ "$gpu" -eq 0 ]; then
    no_gpu_skip "demonstration"
  elif has_time "demonstration" demo 60; then
    section "demonstration on the GPU"
    lim=$(limit "$step_limit")
    start=$(now_ms)
    run_logged "$out/demo.log" "$lim" ./batched_gemm \
      --batch 256 --size 256 --threads "$threads" --samples 11
    rc=$?
    t=$(secs_since "$start")
    demo_lines=$(grep -v -e 'matches the serial result' "$out/demo.log")
    if [ "$rc" -ne 0 ]; then
      record "demonstration" FAIL "$t" "$(note_of "$rc" "$lim")"
    elif ! grep -q '^device: GPU' "$out/demo.log"; then
      record "demonstration" FAIL "$t" "it ran on the CPU: $(grep '^device:' "$out/demo.log")"
    else
      record "demonstration" pass "$t" "batch 256, 256^3, $threads threads, 11 samples"
    fi
  fi
fi

# ---------------------------------------------------------------- bench
bench_rows=""
if [ "$want_bench" -eq 1 ]; then
  if [ "$gpu" -eq 0 ]; then
    no_gpu_skip "GPU benchmarks"
  elif has_time "GPU benchmarks" bench 150; then
    section "GPU benchmarks"
    export CRITERION_HOME="$out/criterion"
    rm -rf "$CRITERION_HOME"
    lim=$(limit "$step_limit")
    start=$(now_ms)
    # shellcheck disable=SC2086 # GPU_BUNDLE_BENCH_ARGS is a list of words
    run_logged "$out/bench.log" "$lim" ./gpu-bench --bench ${GPU_BUNDLE_BENCH_ARGS:-}
    rc=$?
    t=$(secs_since "$start")
    bench_rows=$(find "$CRITERION_HOME" -path '*/new/estimates.json' 2>/dev/null | sort |
      while read -r f; do
        name=${f#"$CRITERION_HOME"/}
        name=${name%/new/estimates.json}
        case "$name" in gpu_*) ;; *) continue ;; esac
        ns=$(sed -E 's/.*"median":\{"confidence_interval":\{[^}]*\},"point_estimate":([0-9.eE+-]+).*/\1/' "$f")
        awk -v n="$name" -v ns="$ns" 'BEGIN {
          if (ns >= 1e6) printf "| %s | %.3f ms |\n", n, ns / 1e6;
          else printf "| %s | %.2f us |\n", n, ns / 1e3;
        }'
      done)
    if [ "$rc" -ne 0 ]; then
      record "GPU benchmarks" FAIL "$t" "$(note_of "$rc" "$lim")"
    elif grep -q 'gpu benchmarks: skipped' "$out/bench.log"; then
      record "GPU benchmarks" FAIL "$t" "skipped: $(grep -m1 'gpu benchmarks: skipped' "$out/bench.log")"
    elif [ -z "$bench_rows" ]; then
      record "GPU benchmarks" FAIL "$t" "no gpu_* estimates in $CRITERION_HOME"
    else
      record "GPU benchmarks" pass "$t" "$(printf '%s\n' "$bench_rows" | wc -l) benchmarks, $threads threads"
    fi
  fi
fi

# ---------------------------------------------------------------- scaling
# Only with a GPU or when asked for by name: on a machine without a GPU
# (CI) `all` would otherwise spend minutes on CPU figures.
scaling_named=0
for arg in "$@"; do [ "$arg" = scaling ] && scaling_named=1; done
scaling_done=() scaling_left=""
threads_word() { if [ "$1" = 1 ]; then echo "1 thread"; else echo "$1 threads"; fi; }
if [ "$want_scaling" -eq 1 ]; then
  if [ "$gpu" -eq 0 ] && [ "$scaling_named" -eq 0 ]; then
    no_gpu_skip "CPU scaling"
  else
    left=""
    for n in $scaling_threads; do
      # A report takes about a minute; the rest goes to a later call.
      if [ -n "$left" ] || [ $((budget - $(elapsed_s))) -lt 90 ]; then
        left="${left:+$left }$n"
        continue
      fi
      section "CPU scaling: bench_report, $(threads_word "$n")"
      lim=$(limit "$step_limit")
      start=$(now_ms)
      # Markdown on stdout (saved), progress on stderr (shown).
      echo "\$ ./bench_report --threads $n --samples $scaling_samples --markdown > $out/scaling-$n.md"
      timeout -k 10 "$lim" ./bench_report --threads "$n" \
        --samples "$scaling_samples" --markdown >"$out/scaling-$n.md"
      rc=$?
      t=$(secs_since "$start")
      if [ "$rc" -eq 0 ]; then
        record "CPU scaling, $(threads_word "$n")" pass "$t" "report: $out/scaling-$n.md"
        scaling_done+=("$n")
      else
        record "CPU scaling, $(threads_word "$n")" FAIL "$t" "$(note_of "$rc" "$lim")"
      fi
    done
    if [ -n "$left" ]; then
      scaling_left="GPU_BUNDLE_SCALING_THREADS=\"$left\" run.sh scaling"
      record "CPU scaling, threads $left" "not run" 0 \
        "out of time (budget ${budget} s): \`$scaling_left\`"
    fi
  fi
fi

# The scaling figures: from each report, the medians of selvedge's
# join/scope version and rayon's for Weave's workloads, and of the nested
# versions of the batched GEMM, one column per thread count.
scaling_table() {
  local n
  for n in "${scaling_done[@]}"; do
    awk -v n="$n" -F'|' '
      function trim(x) { gsub(/^ +| +$/, "", x); return x }
      /^\| workload \| serial \| selvedge spawn \| selvedge join\/scope \| rayon \|/ { w = 1; next }
      w && /^\|---/ { next }
      w && /^\|/ { name = trim($2); sub(/\(.*/, "", name); print n "\t" name "\t" trim($5) " / " trim($6); next }
      { w = 0 }
      /^## Graphs/ { gr = 1 }
      /^## / && !/^## Graphs/ { gr = 0 }
      gr && /^### graph wavefront \(/ { t = $0; sub(/^### graph wavefront \(/, "", t); sub(/, [0-9]+ rounds\)$/, "", t) }
      gr && /^\| selvedge graph \(replayed\) \|/ { replayed = trim($3) }
      gr && /^\| rayon barrier \(par_iter per diagonal\) \|/ { print n "\tgraph replayed, " t "\t" replayed " / " trim($3) }
      # One row per shape of the GEMM section (a table under each "### ").
      /^## Nested batched GEMM/ { g = 1; next }
      /^## / { g = 0 }
      g && /^### / { shape = substr($0, 5); s = "" }
      g && /^\| selvedge, nested and dataflow \|/ { s = trim($3) }
      g && /^\| rayon, nested with a barrier \|/ { print n "\tGEMM, " shape "\t" s " / " trim($3) }
    ' "$out/scaling-$n.md"
  done | awk -F'\t' '
    !($1 in seen_n) { seen_n[$1] = 1; ns[++nn] = $1 }
    !($2 in seen_w) { seen_w[$2] = 1; ws[++nw] = $2 }
    { cell[$2, $1] = $3 }
    END {
      if (nw == 0) exit
      printf "| workload: selvedge / rayon, median ms |"
      for (i = 1; i <= nn; i++) printf " %s %s |", ns[i], ns[i] == 1 ? "thread" : "threads"
      printf "\n|---|"
      for (i = 1; i <= nn; i++) printf "---:|"
      printf "\n"
      for (j = 1; j <= nw; j++) {
        printf "| %s |", ws[j]
        for (i = 1; i <= nn; i++) printf " %s |", ((ws[j], ns[i]) in cell) ? cell[ws[j], ns[i]] : "-"
        printf "\n"
      }
    }'
}

# ---------------------------------------------------------------- summary
{
  echo
  echo "## GPU checks: summary"
  echo
  if [ "$gpu" -eq 1 ]; then
    gpu_name=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)
    echo "Mode: GPU (${gpu_name:-nvidia-smi gave no name}); cuBLAS: ${cublas:-not found}; $(nproc) cores."
  else
    echo "Mode: no GPU ($why)."
  fi
  if [ -f MANIFEST ]; then
    echo
    echo "Bundle: commit $(sed -n 's/^commit: //p' MANIFEST), built $(sed -n 's/^built: //p' MANIFEST)."
  fi
  echo
  echo "| step | result | time | note |"
  echo "|---|---|---:|---|"
  printf '%s\n' "${rows[@]}"
  if [ -n "$demo_lines" ]; then
    echo
    echo "### Demonstration (\`batched_gemm --batch 256 --size 256 --threads $threads --samples 11\`)"
    echo
    echo '```text'
    printf '%s\n' "$demo_lines"
    echo '```'
  fi
  if [ -n "$bench_rows" ]; then
    echo
    echo "### GPU benchmarks (criterion medians, $threads worker threads)"
    echo
    echo "| benchmark | median |"
    echo "|---|---:|"
    printf '%s\n' "$bench_rows"
  fi
  if [ "${#scaling_done[@]}" -gt 0 ]; then
    table=$(scaling_table)
    echo
    echo "### CPU scaling (bench_report, $scaling_samples samples; the whole reports in scaling-N.md beside this summary)"
    echo
    if [ -n "$table" ]; then
      printf '%s\n' "$table"
    else
      echo "(no figures found in the reports: see them)"
    fi
  fi
} | tee "$out/summary.md" "$out/summary-$(date -u +%Y%m%dT%H%M%SZ).md"

if [ "${#not_run[@]}" -gt 0 ] || [ -n "$scaling_left" ]; then
  echo
  later=""
  [ "${#not_run[@]}" -gt 0 ] && later="run.sh ${not_run[*]}"
  [ -n "$scaling_left" ] && later="${later:+$later; }$scaling_left"
  echo "INCOMPLETE: steps left out for lack of time; run them in another call: $later"
fi
if [ "$gpu" -eq 0 ]; then
  echo
  if [ "$failed" -eq 1 ]; then
    echo "no GPU ($why), and a step FAILED"
  elif [ "$want_tests" -eq 1 ]; then
    echo "SKIPPED: no GPU ($why): the GPU tests ran and said they skipped; no GPU check was made"
  else
    echo "SKIPPED: no GPU ($why): no GPU check was made"
  fi
fi
exit "$failed"
