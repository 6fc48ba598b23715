#include "cli/demo_model.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <system_error>

#include "cli/demo_model_files.h"

namespace peregrine::cli {
namespace {

uint64_t Fnv1a(uint64_t h, std::string_view bytes) {
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

std::filesystem::path CacheRoot() {
  if (const char* d = std::getenv("PEREGRINE_CACHE_DIR"); d != nullptr && *d != '\0') return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d != nullptr && *d != '\0')
    return std::filesystem::path(d) / "peregrine";
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0')
    return std::filesystem::path(h) / ".cache" / "peregrine";
  std::error_code ec;
  return std::filesystem::temp_directory_path(ec) / "peregrine";
}

bool HasFile(const std::filesystem::path& path, size_t size) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec) && std::filesystem::file_size(path, ec) == size && !ec;
}

Status WriteAtomically(const std::filesystem::path& path, std::string_view bytes) {
  const std::filesystem::path tmp = path.string() + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Unavailable("cannot write the demo model into " + path.parent_path().string());
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) return Unavailable("cannot write the demo model into " + path.parent_path().string());
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Unavailable("cannot write the demo model into " + path.parent_path().string());
  return Status::Ok();
}

}  // namespace

std::vector<EmbeddedFile> DemoModelFiles() { return EmbeddedDemoModelFiles(); }

Result<std::filesystem::path> DemoModelDir() {
  const std::vector<EmbeddedFile> files = DemoModelFiles();
  if (files.empty()) return NotFound("this binary was built without the demo model");
  uint64_t h = 0xcbf29ce484222325ull;
  for (const EmbeddedFile& f : files) h = Fnv1a(Fnv1a(h, f.name), f.bytes);
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  const std::filesystem::path dir = CacheRoot() / (std::string("deepseek-v4-demo-") + hex);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Unavailable("cannot create " + dir.string() + " for the demo model (set PEREGRINE_CACHE_DIR)");
  for (const EmbeddedFile& f : files) {
    const std::filesystem::path path = dir / std::string(f.name);
    if (HasFile(path, f.bytes.size())) continue;
    PG_RETURN_IF_ERROR(WriteAtomically(path, f.bytes));
  }
  return dir;
}

}  // namespace peregrine::cli
