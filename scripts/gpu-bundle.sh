#!/usr/bin/env bash
# Builds the GPU bundle: every binary the GPU checks need, built here with
# the `cuda` feature (the CUDA libraries are loaded at run time, so no GPU
# and no CUDA toolkit are needed to build), copied with the run script
# into `.gpu-bundle/`. Copy that folder to a GPU machine and run
# `.gpu-bundle/run.sh` there: no Rust toolchain needed (see
# docs/DEVELOPING.md, "Running the GPU checks on a GPU machine").
#
#   scripts/gpu-bundle.sh
#
# The bundle holds, in release mode, without debug info:
#   tests/<name>    every GPU integration test (tests/gpu*.rs)
#   gpu-bench       the GPU criterion benchmarks (tools/benches/gpu.rs)
#   batched_gemm    the demonstration (tools/src/bin/batched_gemm.rs)
#   bench_report    the CPU benchmark report, for scaling figures
#   run.sh          the run script (scripts/gpu-bundle-run.sh)
#   MANIFEST        what was built, from which commit, with which toolchain
#
# The build has a target dir of its own, GPU_BUNDLE_TARGET_DIR, by default
# `gpu-bundle` under CARGO_TARGET_DIR (or under `target`), so that its
# profile settings (no debug info) do not make other builds start over.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

limit_mib=60
bundle="$root/.gpu-bundle"
target_dir="${GPU_BUNDLE_TARGET_DIR:-${CARGO_TARGET_DIR:-target}/gpu-bundle}"
export CARGO_TARGET_DIR="$target_dir"
export CARGO_TERM_COLOR=never
# Small binaries: no debug info (not even the standard library's), but
# the symbol table stays, so that a backtrace from the GPU machine names
# its functions (about 11 MiB in all; without symbols, 8 MiB and
# backtraces of bare addresses). Panic messages name the file and line.
export CARGO_PROFILE_RELEASE_DEBUG=false
export CARGO_PROFILE_RELEASE_STRIP=debuginfo

# The GPU integration tests: tests/gpu*.rs (and tests/gpu*/main.rs).
tests=()
for f in tests/gpu*.rs tests/gpu*/main.rs; do
  [ -e "$f" ] || continue
  case "$f" in
    */main.rs) name=$(basename "$(dirname "$f")") ;;
    *) name=$(basename "$f" .rs) ;;
  esac
  tests+=("$name")
done
if [ "${#tests[@]}" -eq 0 ]; then
  echo "gpu-bundle: no GPU tests (tests/gpu*.rs) found" >&2
  exit 1
fi

targets=()
for t in "${tests[@]}"; do
  targets+=(--test "$t")
done
# `--bench gpu` in the release profile: the same binary as
# `cargo bench -p selvedge-tools --no-run --features cuda --bench gpu` (whose bench profile
# differs from release only in debug info, which the bundle drops), built
# in the same cargo run as the rest so that they share every dependency.
targets+=(--bench gpu --bin batched_gemm --bin bench_report)

echo "gpu-bundle: building ${targets[*]} (release, --features cuda) in $target_dir"
start=$(date +%s)
json=$(mktemp)
trap 'rm -f "$json"' EXIT
# Cargo's diagnostics go to stderr as usual; stdout is the JSON messages.
# The tests are selvedge's, the rest selvedge-tools' (whose `cuda` feature
# turns on selvedge's).
cargo build --release -p selvedge -p selvedge-tools \
  --features selvedge/cuda,selvedge-tools/cuda "${targets[@]}" \
  --message-format=json-render-diagnostics >"$json"
build_s=$(( $(date +%s) - start ))

# One line per executable: "<kind> <target name> <path>". Cargo writes the
# target object's fields in a fixed order (kind, crate_types, name, ...).
artifacts=$(sed -n \
  's/.*"reason":"compiler-artifact".*"target":{"kind":\["\([a-z-]*\)"\][^}]*"name":"\([^"]*\)".*"executable":"\([^"]*\)".*/\1 \2 \3/p' \
  "$json")

path_of() { # kind name
  printf '%s\n' "$artifacts" | awk -v k="$1" -v n="$2" '$1 == k && $2 == n { print $3 }' | tail -n 1
}

rm -rf "$bundle"
mkdir -p "$bundle/tests"
copy() { # kind name destination
  local src
  src=$(path_of "$1" "$2")
  if [ -z "$src" ] || [ ! -x "$src" ]; then
    echo "gpu-bundle: cargo reported no executable for $1 \`$2\`" >&2
    exit 1
  fi
  cp "$src" "$bundle/$3"
}
for t in "${tests[@]}"; do
  copy test "$t" "tests/$t"
done
copy bench gpu gpu-bench
copy bin batched_gemm batched_gemm
copy bin bench_report bench_report
cp scripts/gpu-bundle-run.sh "$bundle/run.sh"
chmod +x "$bundle/run.sh"

{
  echo "selvedge GPU bundle"
  echo "built: $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -m) ($(uname -s))"
  commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
  if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    commit="$commit, with uncommitted changes"
  fi
  echo "commit: $commit"
  echo "toolchain: $(rustc --version)"
  echo "features: cuda; profile: release, no debug info (symbols kept)"
  echo "tests: ${tests[*]}"
  if command -v objdump >/dev/null 2>&1; then
    glibc=$(for f in "$bundle"/gpu-bench "$bundle"/batched_gemm "$bundle"/bench_report "$bundle"/tests/*; do
      objdump -T "$f" | grep -o 'GLIBC_[0-9.]*'
    done | sort -V -u | tail -n 1)
    echo "needs: glibc ${glibc#GLIBC_} or later (built against $(ldd --version | head -n 1))"
  fi
} >"$bundle/MANIFEST"

size_kib=$(du -sk "$bundle" | cut -f1)
echo
echo "gpu-bundle: built in ${build_s} s; $bundle:"
(cd "$bundle" && ls -l run.sh MANIFEST gpu-bench batched_gemm bench_report tests/*) |
  awk '{ printf "  %10d  %s\n", $5, $NF }'
awk -v k="$size_kib" 'BEGIN { printf "gpu-bundle: size %.1f MiB\n", k / 1024 }'
if [ "$size_kib" -gt $((limit_mib * 1024)) ]; then
  echo "gpu-bundle: the bundle is over ${limit_mib} MiB (a GPU session carries at most 64 MiB)" >&2
  exit 1
fi
