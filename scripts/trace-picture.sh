#!/usr/bin/env bash
# Produces docs/images/gemm-timeline.svg: a timeline picture of one traced
# run of the batched GEMM demonstration (one row per worker, the tasks
# coloured by name, parks, steal requests and dataflow arrows), with the
# trace itself (Chrome trace-event JSON, for Perfetto or chrome://tracing)
# left in target/trace/gemm.json.
#
#   scripts/trace-picture.sh [batched_gemm options...]
#
# Any arguments go to the demonstration, e.g.
#   scripts/trace-picture.sh --batch 16 --size 128 --threads 4
# TITLE overrides the picture's title; PICTURE where it goes; PROFILE the
# cargo profile the two programs are built in (release by default; CI's
# small run uses dev, to share the debug build of the tests).
set -euo pipefail
cd "$(dirname "$0")/.."

trace=target/trace/gemm.json
picture=${PICTURE:-docs/images/gemm-timeline.svg}
title=${TITLE:-"Batched GEMM on selvedge: one traced run"}
profile=${PROFILE:-release}

mkdir -p "$(dirname "$trace")" "$(dirname "$picture")"
# `--trace` needs the `trace` feature (without it the demonstration refuses).
cargo run --profile "$profile" -p selvedge-tools --features trace --bin batched_gemm -- --trace "$trace" "$@"
# The same features, so that cargo does not build selvedge a second time.
cargo run --profile "$profile" -p selvedge-tools --features trace --bin trace_timeline -- \
  "$trace" "$picture" --title "$title"
echo "trace-picture: wrote $picture (trace: $trace)"
