// The fine wavefront of `tools/src/dataflow/fine_wavefront.rs` (the same
// tile kernel, grid and dependencies), written for the C++ runtimes the
// library is compared with. Built and run by `scripts/peers.sh`, which
// alternates it with `bench_report`'s own runs of the same grids, so that
// the ratios compare samples taken side by side.
//
// - `taskflow silent_dependent_async`: Taskflow's dynamic tasks, the
//   counterpart of `spawn_delayed`; every tile made up front by the calling
//   thread, which is not one of the executor's workers, so its counterpart
//   is the `Runtime::spawn_delayed (from the main thread)` row.
// - `taskflow graph, re-run`: a Taskflow graph of the tiles built once and
//   run again each sample (its counterpart, a replayed `Graph`, is in
//   `bench_report`'s graph section).
// - `openmp task depend`: OpenMP tasks with `depend` clauses made by one
//   thread. Not all made up front: GCC's runtime queues at most 64 tasks
//   per thread and past that runs each new task on the making thread (a
//   bounded window, like the `8 rows ahead` row). `scripts/peers.sh` runs
//   it with `OMP_WAIT_POLICY=passive`: its idle threads sleep at once
//   (so they take no CPU from the other programs' runs), and each task
//   that wakes one pays for the wake-up.
//
// Usage: wavefront GRID ROUNDS THREADS SAMPLES
// Prints one line per implementation: name, median ms, min, max, and the
// median over serial / THREADS.

#include <taskflow/taskflow.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

static inline uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// `tile_kernel` of fine_wavefront.rs.
__attribute__((noinline)) static uint64_t tile_kernel(size_t idx, uint64_t up, uint64_t left,
                                                       uint32_t rounds) {
  uint64_t x = up ^ (uint64_t(idx) * 0xA24BAED4963EE407ULL);
  uint64_t y = rotl(left, 29);
  for (uint32_t r = 0; r < rounds; ++r) {
    x = mix(x + y);
    y = rotl(y, 5) ^ x;
  }
  return x ^ y;
}

struct Grid {
  size_t g;
  uint32_t rounds;
  std::vector<std::atomic<uint64_t>> digests;
  Grid(size_t g, uint32_t rounds) : g(g), rounds(rounds), digests(g * g) {
    for (auto& d : digests) d.store(0, std::memory_order_relaxed);
  }
  // `run_tile` of fine_wavefront.rs.
  void run_tile(size_t idx) {
    size_t i = idx / g, j = idx % g;
    uint64_t up = i > 0 ? digests[idx - g].load(std::memory_order_relaxed) : (0x0E06E000ULL ^ j);
    uint64_t left = j > 0 ? digests[idx - 1].load(std::memory_order_relaxed) : (0x1EF70000ULL ^ i);
    digests[idx].store(tile_kernel(idx, up, left, rounds), std::memory_order_relaxed);
  }
  uint64_t checksum() const {
    uint64_t h = 0;
    for (auto& d : digests) h = mix(h ^ d.load(std::memory_order_relaxed));
    return h;
  }
};

static uint64_t serial(size_t g, uint32_t rounds) {
  Grid grid(g, rounds);
  for (size_t idx = 0; idx < g * g; ++idx) grid.run_tile(idx);
  return grid.checksum();
}

// Every tile made up front from the calling thread, each after its up and
// left tiles.
static uint64_t taskflow_dynamic(tf::Executor& ex, size_t g, uint32_t rounds) {
  Grid grid(g, rounds);
  std::vector<tf::AsyncTask> tasks(g * g);
  for (size_t idx = 0; idx < g * g; ++idx) {
    size_t i = idx / g, j = idx % g;
    auto body = [&grid, idx] { grid.run_tile(idx); };
    if (i > 0 && j > 0) {
      tasks[idx] = ex.silent_dependent_async(body, tasks[idx - g], tasks[idx - 1]);
    } else if (i > 0) {
      tasks[idx] = ex.silent_dependent_async(body, tasks[idx - g]);
    } else if (j > 0) {
      tasks[idx] = ex.silent_dependent_async(body, tasks[idx - 1]);
    } else {
      tasks[idx] = ex.silent_dependent_async(body);
    }
  }
  ex.wait_for_all();
  return grid.checksum();
}

// A graph of the tiles, built once (outside the timed runs) and re-run.
struct TaskflowGraph {
  Grid grid;
  tf::Taskflow flow;
  TaskflowGraph(size_t g, uint32_t rounds) : grid(g, rounds) {
    std::vector<tf::Task> tasks(g * g);
    for (size_t idx = 0; idx < g * g; ++idx) {
      tasks[idx] = flow.emplace([this, idx] { grid.run_tile(idx); });
      if (idx / g > 0) tasks[idx - g].precede(tasks[idx]);
      if (idx % g > 0) tasks[idx - 1].precede(tasks[idx]);
    }
  }
  uint64_t run(tf::Executor& ex) {
    // Cleared as the other implementations' fresh grids are.
    for (auto& d : grid.digests) d.store(0, std::memory_order_relaxed);
    ex.run(flow).wait();
    return grid.checksum();
  }
};

// OpenMP tasks made up front by one thread, each depending on its up and
// left tiles' digests.
static uint64_t openmp_depend(size_t g, uint32_t rounds, int threads) {
  Grid grid(g, rounds);
  std::atomic<uint64_t>* d = grid.digests.data();
#pragma omp parallel num_threads(threads)
#pragma omp single
  for (size_t idx = 0; idx < g * g; ++idx) {
    size_t i = idx / g, j = idx % g;
    std::atomic<uint64_t>* up = i > 0 ? &d[idx - g] : &d[idx];
    std::atomic<uint64_t>* left = j > 0 ? &d[idx - 1] : &d[idx];
#pragma omp task depend(in : up[0], left[0]) depend(out : d[idx]) firstprivate(idx)
    grid.run_tile(idx);
  }
  return grid.checksum();
}

struct Row {
  std::string name;
  std::vector<double> ms;
};

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s GRID ROUNDS THREADS SAMPLES\n", argv[0]);
    return 2;
  }
  size_t g = std::strtoul(argv[1], nullptr, 10);
  uint32_t rounds = std::strtoul(argv[2], nullptr, 10);
  int threads = std::atoi(argv[3]);
  int samples = std::atoi(argv[4]);
  if (g < 1 || threads < 1 || samples < 1) {
    std::fprintf(stderr, "GRID, THREADS and SAMPLES must be at least 1\n");
    return 2;
  }
  tf::Executor ex(threads);
  TaskflowGraph graph(g, rounds);
  uint64_t want = serial(g, rounds);
  std::vector<std::pair<std::string, std::function<uint64_t()>>> impls = {
      {"serial", [&] { return serial(g, rounds); }},
      {"taskflow silent_dependent_async (made up front)", [&] { return taskflow_dynamic(ex, g, rounds); }},
      {"taskflow graph, re-run", [&] { return graph.run(ex); }},
      {"openmp task depend (one thread makes them)", [&] { return openmp_depend(g, rounds, threads); }},
  };
  std::vector<Row> rows;
  for (auto& [name, f] : impls) rows.push_back({name, {}});
  // Samples of every implementation interleaved, after a warm-up each.
  for (auto& [name, f] : impls) {
    if (f() != want) {
      std::fprintf(stderr, "%s: wrong checksum\n", name.c_str());
      return 1;
    }
  }
  for (int s = 0; s < samples; ++s) {
    for (size_t k = 0; k < impls.size(); ++k) {
      auto t0 = std::chrono::steady_clock::now();
      uint64_t got = impls[k].second();
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (got != want) {
        std::fprintf(stderr, "%s: wrong checksum\n", impls[k].first.c_str());
        return 1;
      }
      rows[k].ms.push_back(ms);
    }
  }
  double ideal = median(rows[0].ms) / threads;
  for (auto& r : rows) {
    double m = median(r.ms);
    std::printf("%s | %.2f | %.2f | %.2f | %.2f\n", r.name.c_str(), m,
                *std::min_element(r.ms.begin(), r.ms.end()),
                *std::max_element(r.ms.begin(), r.ms.end()), m / ideal);
  }
  return 0;
}
