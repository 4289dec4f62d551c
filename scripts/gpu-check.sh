#!/usr/bin/env bash
# The one command to run on a GPU machine: builds with the `cuda` feature,
# runs the GPU tests (a missing GPU fails them here), the demonstration on
# the GPU and the GPU benchmarks, then prints the benchmarks' medians as a
# Markdown table.
#
#   scripts/gpu-check.sh            # SELVEDGE_BENCH_THREADS defaults to all cores
set -euo pipefail
cd "$(dirname "$0")/.."
export SELVEDGE_REQUIRE_GPU=1
export CARGO_TERM_COLOR=never
threads="${SELVEDGE_BENCH_THREADS:-$(nproc)}"
export SELVEDGE_BENCH_THREADS="$threads"

step() { printf '\n=== %s\n' "$*"; }

step "machine"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
else
  echo "nvidia-smi not found"
fi
echo "cores: $(nproc), worker threads: $threads"

step "build"
cargo build --release --features cuda --all-targets

step "GPU tests"
cargo test --release --features cuda --test gpu --test gpu_fault -- --nocapture
cargo test --release --features cuda --lib inbox
# The GPU examples in the docs (the gpu module's) with a GPU.
cargo test --release --features cuda --doc gpu

step "demonstration on the GPU"
cargo run --release --features cuda --example batched_gemm -- \
  --batch 256 --size 256 --threads "$threads" --samples 11

step "GPU benchmarks"
cargo bench --features cuda --bench gpu

step "summary (criterion medians)"
printf '| benchmark | median |\n|---|---:|\n'
find target/criterion -path '*/new/estimates.json' | sort | while read -r f; do
  case "$f" in
    target/criterion/gpu_*) ;;
    *) continue ;;
  esac
  name="${f#target/criterion/}"
  name="${name%/new/estimates.json}"
  ns=$(sed -E 's/.*"median":\{"confidence_interval":\{[^}]*\},"point_estimate":([0-9.eE+-]+).*/\1/' "$f")
  awk -v n="$name" -v ns="$ns" 'BEGIN {
    if (ns >= 1e6) printf "| %s | %.3f ms |\n", n, ns / 1e6;
    else printf "| %s | %.2f us |\n", n, ns / 1e3;
  }'
done
