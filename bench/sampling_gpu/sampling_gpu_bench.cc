// peregrine_sampling_bench: the sampling kernel at V4's vocabulary (129,280) for batch 1, 16, 64,
// 128 and each setting (greedy, temperature, top-p 0.9, top-k 50, min-p 0.05). Times the launch
// with CUDA events (median of 25 runs after warm-up; the logits are restored before each run,
// since the edits work in place, and that copy is outside the timed region) and a peer in the
// same process: what the server does today, a device-to-host copy of the logits and
// peregrine::Sample() on every row, timed on the host including the copy.
//
// Then the drafter's candidates kernel (K = 1 and 4, batch 1, 16, 64) against the sampling
// kernel's top-logprobs path in the same process.
//
// With --phases, one more stamped launch per shape reports where a row's time goes (medians over
// the rows of the SM clock between the kernel's stamps, kernels/sampling.cuh SamplingPhase, in
// us at each row's own clock rate as the global timer measured it) and the slowest row's time.
//
//   peregrine_sampling_bench [--out FILE.jsonl] [--phases] [--draft-only]   (--draft-only: the
//   drafter's candidates alone)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/allocator.h"
#include "backend/cuda/ops/sampling.h"
#include "backend/cuda/stream.h"
#include "kernels/sampling.cuh"
#include "sampling/device_rows.h"
#include "sampling/sampler.h"

namespace peregrine {
namespace {

constexpr int64_t kVocab = 129280;
constexpr double kRooflineTBs = 4.3;
constexpr int kWarmup = 3, kRuns = 25, kHostRuns = 5;

void Must(const Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}
void MustCuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}
template <typename T>
T MustValue(Result<T> r, const char* what) {
  Must(r.status(), what);
  return std::move(r).value();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Setting {
  const char* name;
  SamplingParams params;
};

std::vector<Setting> Settings() {
  std::vector<Setting> s(5);
  s[0].name = "greedy";
  s[0].params.temperature = 0.0f;
  s[1].name = "temperature";
  s[1].params.temperature = 0.8f;
  s[2].name = "top_p=0.9";
  s[2].params.top_p = 0.9f;
  s[3].name = "top_k=50";
  s[3].params.top_k = 50;
  s[4].name = "min_p=0.05";
  s[4].params.min_p = 0.05f;
  return s;
}

// One stamped launch: per row, each phase's cycles at the row's clock rate (cycles between the
// start and end stamps over the global time between them). Prints the medians over the rows and
// the slowest row's own phases, and returns them as JSON fields.
std::string PhaseReport(cuda::SamplingArgs a, const cuda::DeviceBuffer& stamps, int64_t batch, cuda::DeviceBuffer& work,
                        const cuda::DeviceBuffer& pristine, size_t bytes, cuda::Stream& stream) {
  constexpr int kPhases = kernels::kSamplingPhases;
  a.phase_stamps = Tensor::Contiguous(stamps.data(), DType::kI64, {batch, kPhases}, Device::kCuda);
  MustCuda(cudaMemcpyAsync(work.data(), pristine.data(), bytes, cudaMemcpyDeviceToDevice, stream.get()), "restore");
  Must(cuda::Sample(a, stream.get()), "sample (stamped)");
  Must(stream.Synchronize(), "sync");
  std::vector<int64_t> st(static_cast<size_t>(batch * kPhases));
  MustCuda(cudaMemcpy(st.data(), stamps.data(), st.size() * 8, cudaMemcpyDeviceToHost), "stamps");
  static constexpr const char* kNames[] = {"prepare", "phase1", "phase2", "phase3", "finish"};
  constexpr int kNamed = static_cast<int>(std::size(kNames));
  std::vector<std::vector<double>> us(kNamed);
  std::vector<double> total;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t* r = st.data() + b * kPhases;
    const double ns = static_cast<double>(r[kernels::kSamplingEndNs] - r[kernels::kSamplingStartNs]);
    const double cycles = static_cast<double>(r[kernels::kSamplingEndCycles] - r[kernels::kSamplingStartCycles]);
    if (!(cycles > 0.0)) continue;
    const double us_per_cycle = ns / cycles * 1e-3;
    for (int i = 0; i < kNamed; ++i) {
      us[static_cast<size_t>(i)].push_back(
          static_cast<double>(r[kernels::kSamplingStartCycles + i + 1] - r[kernels::kSamplingStartCycles + i]) * us_per_cycle);
    }
    total.push_back(ns * 1e-3);
  }
  if (total.empty()) return "";
  // phases_us holds the medians, then the slowest row's own phases, row and slowest_row.
  std::string json = ",\"phases_us\":{";
  // Prints each phase's value (`first_separator` before the first) and appends them as fields.
  auto phases = [&](const char* first_separator, auto value_of) {
    for (int i = 0; i < kNamed; ++i) {
      const double v = value_of(static_cast<size_t>(i));
      std::printf("%s%s %.2f", i > 0 ? " " : first_separator, kNames[i], v);
      char field[64];
      std::snprintf(field, sizeof(field), "%s\"%s\":%.3f", i > 0 ? "," : "", kNames[i], v);
      json += field;
    }
  };
  std::printf("  phases (median over rows, us):");
  phases(" ", [&](size_t i) { return Median(us[i]); });
  const double t = Median(total);
  // The slowest row's own phases (a row with a large nucleus or many ties shows here).
  const size_t worst = static_cast<size_t>(std::max_element(total.begin(), total.end()) - total.begin());
  const double slowest = total[worst];
  std::printf(" | row %.2f, slowest row %.2f (", t, slowest);
  json += ",\"slowest_row_phases\":{";
  phases("", [&](size_t i) { return us[i][worst]; });
  std::printf(")\n");
  char field[96];
  std::snprintf(field, sizeof(field), "},\"row\":%.3f,\"slowest_row\":%.3f}", t, slowest);
  return json + field;
}

}  // namespace
}  // namespace peregrine

int main(int argc, char** argv) {
  using namespace peregrine;
  const char* out_path = nullptr;
  bool phases = false, draft_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
      out_path = argv[++i];
    } else if (std::strcmp(argv[i], "--phases") == 0) {
      phases = true;
    } else if (std::strcmp(argv[i], "--draft-only") == 0) {
      draft_only = true;
    } else {
      std::fprintf(stderr, "usage: peregrine_sampling_bench [--out FILE.jsonl] [--phases] [--draft-only]\n");
      return 2;
    }
  }
  FILE* out = out_path != nullptr ? std::fopen(out_path, "w") : nullptr;
  if (out_path != nullptr && out == nullptr) {
    std::fprintf(stderr, "cannot open %s\n", out_path);
    return 1;
  }
  cuda::CudaRawAllocator raw;
  cuda::CachingAllocator alloc(raw);
  cuda::Stream stream = MustValue(cuda::Stream::Create(), "stream");
  cuda::Event start = MustValue(cuda::Event::Create(true), "event");
  cuda::Event end = MustValue(cuda::Event::Create(true), "event");
  auto buffer = [&](size_t bytes) { return MustValue(alloc.Allocate(bytes), "allocate"); };

  constexpr int64_t kMaxBatch = 128;
  // LM-like logits: a normal bulk and a few strong candidates per row.
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(static_cast<size_t>(kMaxBatch * kVocab));
  for (float& v : logits) v = normal(rng);
  for (int64_t b = 0; b < kMaxBatch; ++b) {
    for (int j = 0; j < 8; ++j) logits[static_cast<size_t>(b * kVocab + (b * 977 + j * 4099) % kVocab)] += 10.0f + static_cast<float>(j);
  }
  cuda::DeviceBuffer pristine = buffer(logits.size() * 4), work = buffer(logits.size() * 4);
  MustCuda(cudaMemcpy(pristine.data(), logits.data(), logits.size() * 4, cudaMemcpyHostToDevice), "upload");
  cuda::DeviceBuffer rows = buffer(kMaxBatch * 32), offsets = buffer((kMaxBatch + 1) * 4), tokens = buffer(kMaxBatch * 4),
                     logprobs = buffer(kMaxBatch * 4), top_tokens = buffer(kMaxBatch * 80), top_logprobs = buffer(kMaxBatch * 80),
                     status = buffer(kMaxBatch * 4), stamps = buffer(kMaxBatch * kernels::kSamplingPhases * 8);
  std::vector<float> host_logits(logits.size());
  // Uploads a batch's rows and edit offsets and points a sampling launch over `logits` at them.
  auto sampling_args = [&](const DeviceSamplingBatch& rows_host, void* logits_d, int64_t batch) {
    MustCuda(cudaMemcpy(rows.data(), rows_host.rows.data(), rows_host.rows.size() * 32, cudaMemcpyHostToDevice), "rows");
    MustCuda(cudaMemcpy(offsets.data(), rows_host.edit_offsets.data(), rows_host.edit_offsets.size() * 4,
                        cudaMemcpyHostToDevice), "offsets");
    cuda::SamplingArgs a;
    a.logits = Tensor::Contiguous(logits_d, DType::kF32, {batch, kVocab}, Device::kCuda);
    a.rows = Tensor::Contiguous(rows.data(), DType::kU8, {batch, 32}, Device::kCuda);
    a.edit_offsets = Tensor::Contiguous(offsets.data(), DType::kI32, {batch + 1}, Device::kCuda);
    a.tokens = Tensor::Contiguous(tokens.data(), DType::kI32, {batch}, Device::kCuda);
    a.logprobs = Tensor::Contiguous(logprobs.data(), DType::kF32, {batch}, Device::kCuda);
    a.top_tokens = Tensor::Contiguous(top_tokens.data(), DType::kI32, {batch, 20}, Device::kCuda);
    a.top_logprobs = Tensor::Contiguous(top_logprobs.data(), DType::kF32, {batch, 20}, Device::kCuda);
    a.status = Tensor::Contiguous(status.data(), DType::kI32, {batch}, Device::kCuda);
    return a;
  };

  if (!draft_only)
    std::printf("%-12s %5s %10s %10s %8s %8s %12s %9s %s\n", "setting", "batch", "time_us", "MB_read", "TB/s",
                "roofline", "host_us", "speedup", "overflow");
  for (const Setting& setting : draft_only ? std::vector<Setting>{} : Settings()) {
    for (int64_t batch : {1, 16, 64, 128}) {
      std::vector<std::unique_ptr<SequenceSamplingState>> states;
      DeviceSamplingBatch rows_host;
      for (int64_t b = 0; b < batch; ++b) {
        SamplingParams p = setting.params;
        p.seed = static_cast<uint64_t>(b);
        states.push_back(std::make_unique<SequenceSamplingState>(p, std::span<const int32_t>()));
        AppendDeviceRow(p, *states.back(), kVocab, rows_host);
      }
      const cuda::SamplingArgs a = sampling_args(rows_host, work.data(), batch);
      const size_t bytes = static_cast<size_t>(batch * kVocab * 4);
      std::vector<double> ms;
      for (int i = 0; i < kWarmup + kRuns; ++i) {
        MustCuda(cudaMemcpyAsync(work.data(), pristine.data(), bytes, cudaMemcpyDeviceToDevice, stream.get()), "restore");
        Must(start.Record(stream.get()), "record");
        Must(cuda::Sample(a, stream.get()), "sample");
        Must(end.Record(stream.get()), "record");
        Must(end.Synchronize(), "sync");
        if (i >= kWarmup) ms.push_back(MustValue(cuda::Event::ElapsedMs(start, end), "elapsed"));
      }
      const double us = Median(ms) * 1e3;
      std::vector<int32_t> st(static_cast<size_t>(batch));
      MustCuda(cudaMemcpy(st.data(), status.data(), st.size() * 4, cudaMemcpyDeviceToHost), "status");
      const int64_t overflow = std::count(st.begin(), st.end(), kernels::kSamplingOverflow);
      // The peer: copy to the host, then Sample() row by row (one thread).
      std::vector<double> host_us;
      for (int i = 0; i < kHostRuns; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        MustCuda(cudaMemcpyAsync(host_logits.data(), pristine.data(), bytes, cudaMemcpyDeviceToHost, stream.get()), "d2h");
        Must(stream.Synchronize(), "sync");
        for (int64_t b = 0; b < batch; ++b) {
          Sample(std::span<float>(host_logits.data() + b * kVocab, static_cast<size_t>(kVocab)), setting.params,
                 *states[static_cast<size_t>(b)]);
        }
        host_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      }
      const double host = Median(host_us);
      const double tbs = static_cast<double>(bytes) / (us * 1e-6) / 1e12;
      std::printf("%-12s %5lld %10.2f %10.2f %8.3f %8.3f %12.1f %9.1f %lld\n", setting.name, static_cast<long long>(batch), us,
                  static_cast<double>(bytes) / 1e6, tbs, tbs / kRooflineTBs, host, host / us, static_cast<long long>(overflow));
      std::string phase_json;
      if (phases) phase_json = PhaseReport(a, stamps, batch, work, pristine, bytes, stream);
      if (out != nullptr) {
        std::fprintf(out,
                     "{\"op\":\"sampling\",\"setting\":\"%s\",\"batch\":%lld,\"vocab\":%lld,\"time_us\":%.3f,"
                     "\"bytes\":%zu,\"tb_s\":%.4f,\"roofline_fraction\":%.4f,\"peer\":\"host Sample incl. d2h copy\","
                     "\"peer_us\":%.2f,\"speedup\":%.2f,\"overflow_rows\":%lld%s}\n",
                     setting.name, static_cast<long long>(batch), static_cast<long long>(kVocab), us, bytes, tbs,
                     tbs / kRooflineTBs, host, host / us, static_cast<long long>(overflow), phase_json.c_str());
      }
    }
  }
  // The drafter's candidates (kernels/draft_candidates.cuh): K tokens and log-probabilities per
  // row in one pass, against its peer in this process, the sampling kernel's greedy rows with
  // num_top_logprobs = K (what the drafter ran before). Neither edits the logits in place.
  std::printf("\n%-18s %5s %10s %8s %8s %12s %9s\n", "draft_candidates", "batch", "time_us", "TB/s", "roofline",
              "sampling_us", "speedup");
  auto time_us = [&](const std::function<Status()>& launch) {
    std::vector<double> ms;
    for (int i = 0; i < kWarmup + kRuns; ++i) {
      Must(start.Record(stream.get()), "record");
      Must(launch(), "launch");
      Must(end.Record(stream.get()), "record");
      Must(end.Synchronize(), "sync");
      if (i >= kWarmup) ms.push_back(MustValue(cuda::Event::ElapsedMs(start, end), "elapsed"));
    }
    return Median(ms) * 1e3;
  };
  for (int32_t k : {1, 4}) {
    for (int64_t batch : {1, 16, 64}) {
      DeviceSamplingBatch rows_host;
      for (int64_t b = 0; b < batch; ++b) {
        DeviceSamplingRow row;
        row.num_top_logprobs = k > 1 ? k : -1;
        rows_host.rows.push_back(row);
        rows_host.edit_offsets.push_back(0);
      }
      const cuda::SamplingArgs a = sampling_args(rows_host, pristine.data(), batch);
      cuda::DraftCandidatesArgs d;
      d.logits = a.logits;
      d.tokens = a.tokens;
      d.k = k;
      if (k > 1) {
        d.top_tokens = a.top_tokens;
        d.top_logprobs = a.top_logprobs;
      }
      const double ours = time_us([&] { return cuda::DraftCandidates(d, stream.get()); });
      const double peer = time_us([&] { return cuda::Sample(a, stream.get()); });
      const size_t bytes = static_cast<size_t>(batch * kVocab * 4);
      const double tbs = static_cast<double>(bytes) / (ours * 1e-6) / 1e12;
      std::printf("K=%-16d %5lld %10.2f %8.3f %8.3f %12.2f %9.2f\n", k, static_cast<long long>(batch), ours, tbs,
                  tbs / kRooflineTBs, peer, peer / ours);
      if (out != nullptr) {
        std::fprintf(out,
                     "{\"op\":\"draft_candidates\",\"k\":%d,\"batch\":%lld,\"vocab\":%lld,\"time_us\":%.3f,"
                     "\"bytes\":%zu,\"tb_s\":%.4f,\"roofline_fraction\":%.4f,"
                     "\"peer\":\"sampling kernel, greedy rows with num_top_logprobs = K\",\"peer_us\":%.3f,"
                     "\"speedup\":%.2f}\n",
                     k, static_cast<long long>(batch), static_cast<long long>(kVocab), ours, bytes, tbs,
                     tbs / kRooflineTBs, peer, peer / ours);
      }
    }
  }
  if (out != nullptr) std::fclose(out);
  return 0;
}
