// Loading an f32 checkpoint borrows the mapping: peak RSS grows by about the file size, not
// twice it. A separate binary so that no other test's allocations sit in the high-water mark.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "model/checkpoint.h"
#include "safetensors_writer.h"

namespace peregrine {
namespace {

// A field of /proc/self/status in bytes ("VmHWM", "VmRSS"); -1 when unavailable.
int64_t StatusBytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1)) * 1024;
  }
  return -1;
}

// Resets VmHWM to the current RSS (Linux >= 4.0).
bool ResetPeakRss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return out.good();
}

TEST(CheckpointRssTest, F32LoadPeakStaysNearFileSize) {
  testing::TempDir dir("rss");
  constexpr int kNumTensors = 16;
  constexpr int64_t kRows = 512, kCols = 1024;  // 2 MiB each, 32 MiB in all
  {
    testing::SafetensorsBuilder builder;
    for (int t = 0; t < kNumTensors; ++t) {
      std::vector<float> values(static_cast<size_t>(kRows * kCols));
      for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>((i + t) % 97);
      builder.F32("model.layers." + std::to_string(t) + ".attn.wq_a.weight", {kRows, kCols},
                  values);
    }
    testing::WriteBytes(dir / "model.safetensors", builder.Build());
  }
  const auto file_bytes =
      static_cast<int64_t>(std::filesystem::file_size(dir / "model.safetensors"));
  if (!ResetPeakRss() || StatusBytes("VmHWM") < 0) GTEST_SKIP() << "no /proc peak-RSS reset";
  const int64_t rss_before = StatusBytes("VmRSS");

  auto ckpt = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  std::vector<HostTensor> tensors;  // all held at once, as a model load does
  double sum = 0;
  for (const std::string& name : (*ckpt)->CanonicalNames()) {
    auto t = (*ckpt)->ReadF32(name, Shape{kRows, kCols});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    for (int64_t i = 0; i < t->view.numel(); ++i) sum += t->f32()[i];  // touch every page
    tensors.push_back(std::move(t).value());
  }
  ASSERT_EQ(tensors.size(), static_cast<size_t>(kNumTensors));
  EXPECT_GT(sum, 0.0);

  const int64_t growth = StatusBytes("VmHWM") - rss_before;
  const double ratio = static_cast<double>(growth) / static_cast<double>(file_bytes);
  std::printf("checkpoint %lld bytes, peak RSS growth %lld bytes (%.3fx)\n",
              static_cast<long long>(file_bytes), static_cast<long long>(growth), ratio);
  EXPECT_LE(ratio, 1.2);
  EXPECT_GE(ratio, 0.5);  // the reads really touched the data
}

}  // namespace
}  // namespace peregrine
