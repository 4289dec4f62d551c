#!/usr/bin/env bash
# Runs the fine wavefronts of `bench_report` side by side with the same
# grids written for Taskflow and OpenMP (`tools/benches/peers/wavefront.cpp`,
# whose header says which selvedge row each one compares with),
# alternating the two programs, and prints each run's rows.
#
# Usage: scripts/peers.sh TASKFLOW_DIR [ROUNDS]
#   TASKFLOW_DIR: a checkout of https://github.com/taskflow/taskflow (its
#   headers are all that is used). Needs g++ with OpenMP, and cargo.
set -euo pipefail
taskflow=$(cd "${1:?usage: scripts/peers.sh TASKFLOW_DIR [ROUNDS]}" && pwd)
rounds=${2:-5}
threads=2
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}
out="$target/peers"
mkdir -p "$out"
# The grids' sizes, read from the Rust workload so the two cannot drift.
const() {
  sed -n "s/^pub const $1: [a-z0-9]* = \([0-9_]*\);/\1/p" tools/src/dataflow/fine_wavefront.rs | tr -d _
}
large="$(const LARGE_GRID) $(const LARGE_ROUNDS)"
small="$(const SMALL_GRID) $(const SMALL_ROUNDS)"
g++ -std=c++20 -O3 -fopenmp -pthread -I "$taskflow" tools/benches/peers/wavefront.cpp -o "$out/wavefront"
cargo build --release -p selvedge-tools --bin bench_report --quiet
for r in $(seq "$rounds"); do
  echo "## round $r"
  # OpenMP's idle threads sleep instead of spinning (see the .cpp file).
  OMP_WAIT_POLICY=passive "$out/wavefront" $large "$threads" 7 | sed "s/^/peer ${large% *}: /"
  OMP_WAIT_POLICY=passive "$out/wavefront" $small "$threads" 7 | sed "s/^/peer ${small% *}: /"
  "$target/release/bench_report" --only dataflow --threads "$threads" --samples 7 |
    awk '/^### fine wavefront \(/ { split(substr($4, 2), s, "x"); g = s[1]; next }
         /^### / { g = "" }
         g != "" && /^\| (serial|selvedge)/ { print "selvedge " g ": " $0 }'
done
