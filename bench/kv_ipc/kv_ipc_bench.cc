// The CUDA-IPC KV transfer between two processes on one GPU: this process fills a staging
// arena (KvStagingArena) with `pages` pages of `regions` regions of `region_bytes`; a child
// process (this binary with --child) opens the arena's handle and copies the pages into its
// own memory three ways, each timed with the L2 flushed: one cudaMemcpy of all the bytes (the
// copy roofline's peer: the bytes are contiguous there), one cudaMemcpyAsync per region
// (what a plain import would do), and the kv_copy kernel that the CUDA runner uses (the
// regions' scatter plus every page's checksum). Prints payload GB/s, HBM traffic TB/s
// (read + write) against the H200's 4.8 TB/s, and checks the checksums against the arena's.
//   peregrine_kv_ipc_bench [--pages N] [--regions R] [--region-bytes B] [--json FILE]
#include <cuda_runtime_api.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/ops/kv_copy.h"
#include "bench/common/gpu_bench.h"
#include "runtime/cuda_kv_staging.h"

extern char** environ;

namespace {

namespace pc = peregrine::cuda;
namespace kernels = peregrine::kernels;
using peregrine::bench::GpuTimer;
using peregrine::bench::Must;
using peregrine::bench::MustCuda;
using peregrine::bench::MustValue;

constexpr double kHbmTBs = 4.8;  // H200 HBM3e peak

struct Layout {
  int64_t pages = 5, regions = 12, region_bytes = 24 << 10;
  int64_t total() const { return pages * regions * region_bytes; }
};

// The arena's regions, page by page, scattered into `dst` with a gap between regions (the
// pools' regions are not contiguous either); dst null: checksums only.
std::vector<pc::KvCopyRange> Ranges(const Layout& l, const uint8_t* src, uint8_t* dst) {
  std::vector<pc::KvCopyRange> r;
  for (int64_t p = 0; p < l.pages; ++p)
    for (int64_t i = 0; i < l.regions; ++i) {
      const int64_t k = p * l.regions + i;
      r.push_back({src + k * l.region_bytes, dst != nullptr ? dst + k * 2 * l.region_bytes : nullptr,
                   static_cast<uint64_t>(l.region_bytes),
                   static_cast<uint64_t>(i * l.region_bytes), static_cast<uint64_t>(p)});
    }
  return r;
}

int Child(const std::string& file, const Layout& l, const std::string& json) {
  std::ifstream in(file);
  cudaIpcMemHandle_t h;
  for (size_t i = 0; i < sizeof h; ++i) {
    int b = 0;
    in >> b;
    reinterpret_cast<uint8_t*>(&h)[i] = static_cast<uint8_t>(b);
  }
  std::vector<uint64_t> want(static_cast<size_t>(l.pages));
  for (uint64_t& c : want) in >> c;
  void* peer = nullptr;
  MustCuda(cudaIpcOpenMemHandle(&peer, h, cudaIpcMemLazyEnablePeerAccess), "open the arena's IPC handle");
  pc::CudaRawAllocator raw;
  pc::CachingAllocator allocator(raw);
  pc::Stream stream = MustValue(pc::Stream::Create(), "stream");
  pc::DeviceBuffer dst = MustValue(allocator.Allocate(static_cast<size_t>(2 * l.total())), "dst");
  pc::DeviceBuffer sums = MustValue(allocator.Allocate(static_cast<size_t>(l.pages) * 8), "sums");
  GpuTimer timer{MustValue(pc::Event::Create(true), "event"), MustValue(pc::Event::Create(true), "event"),
                 MustValue(allocator.Allocate(peregrine::bench::kFlushBytes), "flush"), stream.get()};
  const auto* src = static_cast<const uint8_t*>(peer);
  const std::vector<pc::KvCopyRange> ranges = Ranges(l, src, dst.as<uint8_t>());
  std::vector<kernels::KvCopySegment> segments;
  Must(pc::PlanKvCopy(ranges, &segments), "plan");
  pc::DeviceBuffer seg = MustValue(allocator.Allocate(segments.size() * sizeof segments[0]), "segments");
  MustCuda(cudaMemcpy(seg.data(), segments.data(), segments.size() * sizeof segments[0], cudaMemcpyHostToDevice),
           "upload");
  const double one = timer.Median([&] {
    MustCuda(cudaMemcpyAsync(dst.data(), src, static_cast<size_t>(l.total()), cudaMemcpyDeviceToDevice, stream.get()),
             "memcpy");
  });
  const double each = timer.Median([&] {
    for (const pc::KvCopyRange& r : ranges)
      MustCuda(cudaMemcpyAsync(r.dst, r.src, r.bytes, cudaMemcpyDeviceToDevice, stream.get()), "memcpy");
  });
  const double kernel = timer.Median([&] {
    Must(pc::KvCopy(seg.as<const kernels::KvCopySegment>(), static_cast<int64_t>(segments.size()),
                    sums.as<uint64_t>(), l.pages, stream.get()),
         "kv_copy");
  });
  std::vector<uint64_t> got(static_cast<size_t>(l.pages));
  MustCuda(cudaMemcpy(got.data(), sums.data(), got.size() * 8, cudaMemcpyDeviceToHost), "download");
  const bool ok = got == want;
  const double mb = static_cast<double>(l.total()) / 1e6;
  auto row = [&](const char* what, double ms) {
    const double gbs = static_cast<double>(l.total()) / (ms * 1e-3) / 1e9;
    std::printf("  %-34s %9.1f us %8.1f GB/s  %5.2f TB/s HBM (%4.1f%% of %.1f)  kernel/this %.2fx\n", what,
                ms * 1e3, gbs, 2 * gbs / 1e3, 100 * 2 * gbs / 1e3 / kHbmTBs, kHbmTBs, ms / kernel);
  };
  std::printf("KV over CUDA IPC, across processes: %lld pages x %lld regions x %lld B = %.2f MB, checksums %s\n",
              static_cast<long long>(l.pages), static_cast<long long>(l.regions),
              static_cast<long long>(l.region_bytes), mb, ok ? "match" : "DIFFER");
  row("one cudaMemcpy (contiguous)", one);
  row("cudaMemcpyAsync per region", each);
  row("kv_copy (scatter + checksums)", kernel);
  if (!json.empty()) {
    std::ofstream out(json, std::ios::app);
    char line[512];
    std::snprintf(line, sizeof line,
                  "{\"bench\":\"kv_ipc\",\"pages\":%lld,\"regions\":%lld,\"region_bytes\":%lld,\"bytes\":%lld,"
                  "\"memcpy_us\":%.2f,\"memcpy_per_region_us\":%.2f,\"kv_copy_us\":%.2f,\"kv_copy_gbs\":%.1f,"
                  "\"checksums_match\":%s}\n",
                  static_cast<long long>(l.pages), static_cast<long long>(l.regions),
                  static_cast<long long>(l.region_bytes), static_cast<long long>(l.total()), one * 1e3, each * 1e3,
                  kernel * 1e3, static_cast<double>(l.total()) / (kernel * 1e-3) / 1e9, ok ? "true" : "false");
    out << line;
  }
  MustCuda(cudaIpcCloseMemHandle(peer), "close");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Layout l;
  std::string json, child;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--pages") l.pages = std::atoll(argv[i + 1]);
    else if (k == "--regions") l.regions = std::atoll(argv[i + 1]);
    else if (k == "--region-bytes") l.region_bytes = std::atoll(argv[i + 1]);
    else if (k == "--json") json = argv[i + 1];
    else if (k == "--child") child = argv[i + 1];
  }
  if (l.pages <= 0 || l.regions <= 0 || l.region_bytes <= 0 || l.region_bytes % 8 != 0) {
    std::fprintf(stderr, "pages, regions and region bytes (a multiple of 8) must be positive\n");
    return 2;
  }
  if (!child.empty()) return Child(child, l, json);

  // The prefill side: the arena, random pages, their checksums (the kernel without a
  // destination), the handle for the child.
  auto arena = MustValue(peregrine::KvStagingArena::Create(static_cast<uint64_t>(l.total())), "arena");
  std::vector<uint8_t> host(static_cast<size_t>(l.total()));
  std::mt19937_64 rng(5);
  for (size_t i = 0; i < host.size(); i += 8) {
    const uint64_t v = rng();
    std::memcpy(host.data() + i, &v, std::min<size_t>(8, host.size() - i));
  }
  MustCuda(cudaMemcpy(arena->base(), host.data(), host.size(), cudaMemcpyHostToDevice), "fill");
  pc::CudaRawAllocator raw;
  pc::CachingAllocator allocator(raw);
  std::vector<kernels::KvCopySegment> segments;
  const std::vector<pc::KvCopyRange> ranges = Ranges(l, arena->base(), nullptr);
  Must(pc::PlanKvCopy(ranges, &segments), "plan");
  pc::DeviceBuffer seg = MustValue(allocator.Allocate(segments.size() * sizeof segments[0]), "segments");
  pc::DeviceBuffer sums = MustValue(allocator.Allocate(static_cast<size_t>(l.pages) * 8), "sums");
  MustCuda(cudaMemcpy(seg.data(), segments.data(), segments.size() * sizeof segments[0], cudaMemcpyHostToDevice),
           "upload");
  Must(pc::KvCopy(seg.as<const kernels::KvCopySegment>(), static_cast<int64_t>(segments.size()), sums.as<uint64_t>(),
                  l.pages, nullptr),
       "checksums");
  std::vector<uint64_t> want(static_cast<size_t>(l.pages));
  MustCuda(cudaMemcpy(want.data(), sums.data(), want.size() * 8, cudaMemcpyDeviceToHost), "download");
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("peregrine-kv-ipc-" + std::to_string(getpid()));
  {
    std::ofstream out(file);
    for (uint8_t b : arena->ipc_handle()) out << static_cast<int>(b) << ' ';
    for (uint64_t c : want) out << c << ' ';
  }
  std::vector<std::string> args = {std::filesystem::read_symlink("/proc/self/exe").string(),
                                   "--pages", std::to_string(l.pages), "--regions", std::to_string(l.regions),
                                   "--region-bytes", std::to_string(l.region_bytes), "--child", file.string()};
  if (!json.empty()) {
    args.push_back("--json");
    args.push_back(json);
  }
  std::vector<char*> argv_child;
  for (std::string& a : args) argv_child.push_back(a.data());
  argv_child.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, args[0].c_str(), nullptr, nullptr, argv_child.data(), environ) != 0) {
    std::fprintf(stderr, "cannot start the child process\n");
    return 1;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  std::filesystem::remove(file);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
