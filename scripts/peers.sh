#!/usr/bin/env bash
# Runs the fine wavefronts of `bench_report` side by side with the same
# grids written for Taskflow and OpenMP (`benches/peers/wavefront.cpp`),
# alternating the two programs, and prints each run's rows.
#
# Usage: scripts/peers.sh TASKFLOW_DIR [ROUNDS]
#   TASKFLOW_DIR: a checkout of https://github.com/taskflow/taskflow (its
#   headers are all that is used). Needs g++ with OpenMP, and cargo.
set -euo pipefail
cd "$(dirname "$0")/.."
taskflow=${1:?usage: scripts/peers.sh TASKFLOW_DIR [ROUNDS]}
rounds=${2:-5}
threads=2
out=target/peers
mkdir -p "$out"
g++ -std=c++20 -O2 -fopenmp -pthread -I "$taskflow" benches/peers/wavefront.cpp -o "$out/wavefront"
cargo build --release --example bench_report --quiet
for r in $(seq "$rounds"); do
  echo "## round $r"
  # OpenMP's threads sleep between parallel regions instead of spinning.
  OMP_WAIT_POLICY=passive "$out/wavefront" 256 220 "$threads" 7 | sed 's/^/peer 256: /'
  OMP_WAIT_POLICY=passive "$out/wavefront" 64 1120 "$threads" 7 | sed 's/^/peer 64: /'
  target/release/examples/bench_report --only dataflow --samples 7 |
    awk '/^### fine wavefront \(256/ { g = "256" } /^### fine wavefront \(64/ { g = "64" }
         /^### / && !/fine wavefront/ { g = "" }
         g != "" && /^\| (serial|selvedge)/ { print "selvedge " g ": " $0 }'
done
