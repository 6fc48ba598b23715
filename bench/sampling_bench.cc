// Host sampler cost per row at DeepSeek-V4's vocabulary (129280) on one thread: greedy,
// temperature only (whole vocabulary), top-p, top-k, min-p, and greedy with 20 logprobs.
// Logits are a fixed pseudo-random mix of a few peaked tokens over a Gaussian background,
// rotated over several rows so the branch predictor and caches see fresh data.
// Each case runs in kReps repetitions; the best repetition's wall time per row is reported
// (least disturbed by other processes), beside the thread CPU time of that repetition and the
// machine's one-minute load average, so figures from a busy machine can be read as such.
// Prints microseconds per row and appends one JSON line to --out
// (default bench/results/sampling_cpu.jsonl).
//
//   sampling_bench [--rows-per-case 2000] [--out FILE]
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "sampling/sampler.h"

namespace {

constexpr size_t kVocab = 129280;
constexpr size_t kNumRows = 16;
constexpr int kReps = 7;

double ThreadCpuMicros() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) * 1e-3;
}

// Box-Muller on our own uniform draws: the same logits on every standard library.
std::vector<std::vector<float>> MakeRows() {
  std::mt19937_64 rng(2024);
  const auto uniform = [&rng] { return (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53; };
  std::vector<std::vector<float>> rows(kNumRows, std::vector<float>(kVocab));
  for (auto& row : rows) {
    for (float& logit : row) {
      const double radius = std::sqrt(-2.0 * std::log(uniform()));
      logit = static_cast<float>(2.5 * radius * std::cos(6.283185307179586 * uniform()));
    }
    for (int peak = 0; peak < 8; ++peak) row[rng() % kVocab] = 12.0f + static_cast<float>(peak);
  }
  return rows;
}

struct Case {
  const char* name;
  peregrine::SamplingParams params;
};

std::vector<Case> MakeCases() {
  peregrine::SamplingParams greedy;
  greedy.temperature = 0.0f;
  peregrine::SamplingParams temperature;
  temperature.temperature = 1.0f;
  peregrine::SamplingParams top_p;
  top_p.temperature = 0.8f;
  top_p.top_p = 0.95f;
  peregrine::SamplingParams top_k;
  top_k.temperature = 0.8f;
  top_k.top_k = 50;
  peregrine::SamplingParams min_p;
  min_p.min_p = 0.05f;
  peregrine::SamplingParams greedy_logprobs = greedy;
  greedy_logprobs.logprobs = 20;
  return {{"greedy", greedy},   {"temperature", temperature}, {"top_p_0.95", top_p},
          {"top_k_50", top_k},  {"min_p_0.05", min_p},        {"greedy_logprobs_20", greedy_logprobs}};
}

}  // namespace

int main(int argc, char** argv) {
  int rows_per_case = 2000;
  std::string out = std::string(PEREGRINE_BENCH_RESULTS) + "/sampling_cpu.jsonl";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rows-per-case")) rows_per_case = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--out")) out = argv[i + 1];
  }
  std::vector<std::vector<float>> rows = MakeRows();
  double load = 0.0;
  if (getloadavg(&load, 1) != 1) load = -1.0;
  char head[160];
  std::snprintf(head, sizeof(head), "{\"bench\":\"sampling_cpu\",\"vocab\":%zu,\"threads\":1,\"load1\":%.1f",
                kVocab, load);
  std::string json = head;
  int64_t checksum = 0;
  for (Case& c : MakeCases()) {
    c.params.seed = 7;
    peregrine::SequenceSamplingState state(c.params, {});
    for (size_t warm = 0; warm < 20; ++warm) {
      checksum += peregrine::Sample(rows[warm % kNumRows], c.params, state).token;
    }
    double best_wall = 1e300, cpu_of_best = 0.0;
    const int rows_per_rep = std::max(1, rows_per_case / kReps);
    for (int rep = 0; rep < kReps; ++rep) {
      const double cpu_start = ThreadCpuMicros();
      const auto start = std::chrono::steady_clock::now();
      for (int r = 0; r < rows_per_rep; ++r) {
        checksum += peregrine::Sample(rows[static_cast<size_t>(r) % kNumRows], c.params, state).token;
      }
      const std::chrono::duration<double, std::micro> wall = std::chrono::steady_clock::now() - start;
      const double cpu = ThreadCpuMicros() - cpu_start;
      if (wall.count() < best_wall) {
        best_wall = wall.count();
        cpu_of_best = cpu;
      }
    }
    const double us_per_row = best_wall / rows_per_rep;
    const double cpu_us_per_row = cpu_of_best / rows_per_rep;
    std::printf("%-20s %9.1f us/row (cpu %.1f)\n", c.name, us_per_row, cpu_us_per_row);
    char field[128];
    std::snprintf(field, sizeof(field), ",\"%s_us\":%.1f,\"%s_cpu_us\":%.1f", c.name, us_per_row, c.name,
                  cpu_us_per_row);
    json += field;
  }
  json += "}";
  std::printf("checksum %lld\n", static_cast<long long>(checksum));
  std::ofstream(out, std::ios::app) << json << "\n";
  return 0;
}
