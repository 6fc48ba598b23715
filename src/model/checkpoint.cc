// Checkpoint over memory-mapped safetensors shards. f32 (and i64) tensors whose bytes are
// suitably aligned are borrowed from the mapping; every other read converts into an owned
// buffer, so peak memory for an f32 checkpoint is the mapping itself.
#include "model/checkpoint.h"

#include <fmt/format.h>

#include <map>
#include <new>
#include <unordered_map>

#include "model/dequant.h"
#include "model/mapped_file.h"
#include "model/safetensors.h"
#include "model/shard_index.h"
#include "model/tensor_names.h"

namespace peregrine {
namespace {

// One canonical tensor: a stored tensor, or a slice of an HF fused expert tensor.
struct StoredTensor {
  const MappedFile* file = nullptr;
  std::string stored_name;
  DType dtype = DType::kF32;
  Shape shape;
  const uint8_t* data = nullptr;
  uint64_t num_bytes = 0;
};

enum class Encoding : uint8_t {
  kElementwise,  // f32 / bf16 / f16 / plain fp8 / ue8m0
  kFp8Blocks,    // e4m3 + 128x128 block scales
  kMxfp4,        // packed e2m1 + one ue8m0 scale per 32 inputs
};

struct F32Plan {
  const StoredTensor* weight = nullptr;
  const StoredTensor* scale = nullptr;
  Encoding encoding = Encoding::kElementwise;
  Shape logical;
};

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool IsAligned(const void* p, size_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

// "FILE: tensor 'canonical'" plus the stored name when the dialect renamed it.
std::string Describe(std::string_view canonical, const StoredTensor& t) {
  if (t.stored_name == canonical)
    return fmt::format("{}: tensor '{}'", t.file->path().string(), ShortName(canonical));
  return fmt::format("{}: tensor '{}' (stored as '{}')", t.file->path().string(),
                     ShortName(canonical), ShortName(t.stored_name));
}

// An uninitialised buffer for the converted tensor; ResourceExhausted when it cannot be had.
template <typename T>
Result<HostTensor> OwnedTensor(DType dtype, const Shape& shape, T** out) {
  const auto count = static_cast<size_t>(shape.numel());
  std::shared_ptr<T[]> buffer(new (std::nothrow) T[count == 0 ? 1 : count]);
  if (buffer == nullptr)
    return ResourceExhausted(
        fmt::format("cannot allocate {} for {}", shape.ToString(), DTypeName(dtype)));
  *out = buffer.get();
  return HostTensor{Tensor::Contiguous(buffer.get(), dtype, shape), std::move(buffer)};
}

HostTensor Borrowed(const StoredTensor& t, DType dtype, const Shape& shape) {
  // The mapping is read-only; HostTensor hands it out through const accessors.
  return HostTensor{Tensor::Contiguous(const_cast<uint8_t*>(t.data), dtype, shape), nullptr};
}

class SafetensorsCheckpoint final : public Checkpoint {
 public:
  explicit SafetensorsCheckpoint(std::filesystem::path dir) : dir_(std::move(dir)) {}

  Status Load();

  bool Has(std::string_view name) const override { return Find(name) != nullptr; }
  Result<HostTensor> ReadF32(std::string_view name, const Shape& expected) const override;
  Result<HostTensor> ReadI64(std::string_view name, const Shape& expected) const override;
  Result<std::optional<Fp8BlockTensor>> ReadFp8Blocks(std::string_view name,
                                                      const Shape& expected) const override;
  Result<std::optional<Mxfp4Tensor>> ReadMxfp4(std::string_view name, const Shape& expected) const override;
  Result<std::optional<HostTensor>> ReadBF16(std::string_view name, const Shape& expected) const override;
  Result<Shape> LogicalShape(std::string_view name) const override;
  std::vector<std::string> CanonicalNames() const override;
  uint64_t TotalBytes() const override { return total_bytes_; }

 private:
  const StoredTensor* Find(std::string_view name) const {
    const auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
  }
  Result<const StoredTensor*> Require(std::string_view name) const;
  Result<F32Plan> PlanF32(std::string_view name) const;
  // PlanF32, failing (InvalidArgument naming both shapes) when the logical shape is not `expected`.
  Result<F32Plan> PlanExpected(std::string_view name, const Shape& expected) const;
  Status AddTensor(const MappedFile& file, const SafetensorsEntry& entry);

  std::filesystem::path dir_;
  std::vector<std::unique_ptr<MappedFile>> files_;
  std::map<std::string, StoredTensor, std::less<>> tensors_;      // by canonical name
  std::unordered_map<std::string, const MappedFile*> stored_in_;  // stored name -> shard
  uint64_t total_bytes_ = 0;
};

Status SafetensorsCheckpoint::AddTensor(const MappedFile& file, const SafetensorsEntry& e) {
  const std::string path = file.path().string();
  const auto [owner, inserted] = stored_in_.emplace(e.name, &file);
  if (!inserted)
    return InvalidArgument(fmt::format("tensor '{}' is in both {} and {}", ShortName(e.name),
                                       owner->second->path().string(), path));
  total_bytes_ += e.num_bytes;
  auto slices = MapStoredTensor(e.name, e.shape);
  if (!slices.ok())
    return Status(slices.status().code(), fmt::format("{}: {}", path, slices.status().message()));
  for (const CanonicalSlice& slice : *slices) {
    StoredTensor t{&file,      e.name, e.dtype, slice.shape, file.bytes().data() + e.offset,
                   e.num_bytes};
    if (slice.element_offset != 0 || !(slice.shape == e.shape)) {
      if (DTypeBits(e.dtype) % 8 != 0)
        return Unimplemented(fmt::format("{}: fused tensor '{}' has sub-byte dtype {}", path,
                                         ShortName(e.name), DTypeSafetensorsName(e.dtype)));
      t.data += DTypeBytes(e.dtype, static_cast<size_t>(slice.element_offset));
      t.num_bytes = DTypeBytes(e.dtype, static_cast<size_t>(slice.shape.numel()));
    }
    const auto [it, is_new] = tensors_.emplace(slice.name, t);
    if (!is_new)
      return InvalidArgument(
          fmt::format("{}: '{}' and '{}' (in {}) are both tensor '{}' after name mapping", path,
                      ShortName(e.name), ShortName(it->second.stored_name),
                      it->second.file->path().string(), ShortName(slice.name)));
  }
  return Status::Ok();
}

Status SafetensorsCheckpoint::Load() {
  PG_ASSIGN_OR_RETURN(const ShardList list, FindShards(dir_));
  for (const std::filesystem::path& path : list.shards) {
    Result<MappedFile> file = MappedFile::Open(path);
    if (!file.ok() && file.status().code() == StatusCode::kNotFound && !list.index_path.empty())
      return NotFound(fmt::format("{}: weight_map names shard {}, which does not exist",
                                  list.index_path.string(), path.filename().string()));
    if (!file.ok()) return file.status();
    files_.push_back(std::make_unique<MappedFile>(std::move(file).value()));
    const MappedFile& mapped = *files_.back();
    PG_ASSIGN_OR_RETURN(const SafetensorsHeader header,
                        ParseSafetensors(mapped.bytes(), path.string()));
    for (const SafetensorsEntry& e : header.entries) PG_RETURN_IF_ERROR(AddTensor(mapped, e));
  }
  for (const auto& [tensor, shard] : list.weight_map) {
    const auto it = stored_in_.find(tensor);
    if (it == stored_in_.end() || it->second->path().filename() != shard)
      return NotFound(fmt::format("{}: weight_map puts '{}' in {}, which does not hold it",
                                  list.index_path.string(), ShortName(tensor), shard));
  }
  return Status::Ok();
}

Result<const StoredTensor*> SafetensorsCheckpoint::Require(std::string_view name) const {
  const StoredTensor* t = Find(name);
  if (t == nullptr)
    return NotFound(
        fmt::format("tensor '{}' not found in checkpoint {}", ShortName(name), dir_.string()));
  return t;
}

Result<F32Plan> SafetensorsCheckpoint::PlanF32(std::string_view name) const {
  PG_ASSIGN_OR_RETURN(const StoredTensor* w, Require(name));
  F32Plan plan{w, nullptr, Encoding::kElementwise, w->shape};
  if (name.ends_with(".weight"))
    plan.scale = Find(fmt::format("{}.scale", name.substr(0, name.size() - 7)));
  const bool is_fp8 = w->dtype == DType::kF8E4M3;
  const bool is_packed_fp4 = w->dtype == DType::kI8 || w->dtype == DType::kU8;
  if (IsElementwiseFloat(w->dtype) && !(is_fp8 && plan.scale != nullptr)) {
    plan.scale = nullptr;
    return plan;
  }
  if (plan.scale == nullptr || !(is_fp8 || is_packed_fp4 || w->dtype == DType::kE2M1))
    return InvalidArgument(fmt::format("{} has dtype {}{}, which is not a float tensor",
                                       Describe(name, *w), DTypeSafetensorsName(w->dtype),
                                       plan.scale == nullptr ? " without a scale" : ""));
  const StoredTensor& s = *plan.scale;
  if (w->shape.ndim() != 2)
    return DataLoss(fmt::format("{} is quantised but has shape {}; expected 2 dimensions",
                                Describe(name, *w), w->shape.ToString()));
  const int64_t rows = w->shape[0];
  Shape want_scale;
  if (is_fp8) {
    plan.encoding = Encoding::kFp8Blocks;
    want_scale = Shape{CeilDiv(rows, kFp8BlockSize), CeilDiv(w->shape[1], kFp8BlockSize)};
  } else {
    plan.encoding = Encoding::kMxfp4;
    // The release stores MXFP4 as I8 with two e2m1 per byte: half the logical columns.
    const int64_t cols = w->dtype == DType::kE2M1 ? w->shape[1] : 2 * w->shape[1];
    plan.logical = Shape{rows, cols};
    if (cols % kMxfp4BlockSize != 0)
      return DataLoss(fmt::format("{} is MXFP4 with {} columns, not a multiple of {}",
                                  Describe(name, *w), cols, kMxfp4BlockSize));
    want_scale = Shape{rows, cols / kMxfp4BlockSize};
  }
  const bool scale_dtype_ok = s.dtype == DType::kUE8M0 || (is_fp8 && s.dtype == DType::kF32);
  if (!scale_dtype_ok || !(s.shape == want_scale))
    return DataLoss(fmt::format("{}: scale '{}' is {}{}, but a {}{} weight needs {}{}",
                                Describe(name, *w), ShortName(s.stored_name),
                                DTypeSafetensorsName(s.dtype), s.shape.ToString(),
                                DTypeSafetensorsName(w->dtype), w->shape.ToString(),
                                DTypeSafetensorsName(DType::kUE8M0), want_scale.ToString()));
  return plan;
}

Result<F32Plan> SafetensorsCheckpoint::PlanExpected(std::string_view name, const Shape& expected) const {
  PG_ASSIGN_OR_RETURN(F32Plan plan, PlanF32(name));
  if (!(plan.logical == expected))
    return InvalidArgument(fmt::format("{} has shape {}, expected {}", Describe(name, *plan.weight),
                                       plan.logical.ToString(), expected.ToString()));
  return plan;
}

Result<HostTensor> SafetensorsCheckpoint::ReadF32(std::string_view name,
                                                  const Shape& expected) const {
  PG_ASSIGN_OR_RETURN(const F32Plan plan, PlanExpected(name, expected));
  const StoredTensor& w = *plan.weight;
  if (plan.encoding == Encoding::kElementwise && w.dtype == DType::kF32 &&
      IsAligned(w.data, alignof(float)))
    return Borrowed(w, DType::kF32, plan.logical);

  float* dst = nullptr;
  PG_ASSIGN_OR_RETURN(HostTensor out, OwnedTensor(DType::kF32, plan.logical, &dst));
  switch (plan.encoding) {
    case Encoding::kElementwise:
      ConvertToF32(w.dtype, w.data, static_cast<size_t>(plan.logical.numel()), dst);
      break;
    case Encoding::kFp8Blocks:
      DequantFp8Blocks(w.data, plan.logical[0], plan.logical[1], plan.scale->data,
                       plan.scale->dtype, dst);
      break;
    case Encoding::kMxfp4:
      DequantMxfp4(w.data, plan.logical[0], plan.logical[1], plan.scale->data, dst);
      break;
  }
  return out;
}

Result<std::optional<HostTensor>> SafetensorsCheckpoint::ReadBF16(std::string_view name, const Shape& expected) const {
  PG_ASSIGN_OR_RETURN(const F32Plan plan, PlanExpected(name, expected));
  const StoredTensor& w = *plan.weight;
  if (plan.encoding != Encoding::kElementwise || w.dtype != DType::kBF16 || !IsAligned(w.data, 2))
    return std::optional<HostTensor>();
  return std::optional<HostTensor>(Borrowed(w, DType::kBF16, plan.logical));
}

Result<std::optional<Fp8BlockTensor>> SafetensorsCheckpoint::ReadFp8Blocks(
    std::string_view name, const Shape& expected) const {
  PG_ASSIGN_OR_RETURN(const F32Plan plan, PlanExpected(name, expected));
  const StoredTensor& w = *plan.weight;
  if (plan.encoding != Encoding::kFp8Blocks) return std::optional<Fp8BlockTensor>();
  const StoredTensor& s = *plan.scale;
  float* dst = nullptr;
  PG_ASSIGN_OR_RETURN(HostTensor scales, OwnedTensor(DType::kF32, s.shape, &dst));
  ConvertToF32(s.dtype, s.data, static_cast<size_t>(s.shape.numel()), dst);
  return std::optional<Fp8BlockTensor>(Fp8BlockTensor{Borrowed(w, DType::kF8E4M3, w.shape), std::move(scales)});
}

Result<std::optional<Mxfp4Tensor>> SafetensorsCheckpoint::ReadMxfp4(std::string_view name,
                                                                     const Shape& expected) const {
  PG_ASSIGN_OR_RETURN(const F32Plan plan, PlanExpected(name, expected));
  const StoredTensor& w = *plan.weight;
  if (plan.encoding != Encoding::kMxfp4) return std::optional<Mxfp4Tensor>();
  const int64_t rows = plan.logical[0], cols = plan.logical[1];
  return std::optional<Mxfp4Tensor>(Mxfp4Tensor{Borrowed(w, DType::kU8, Shape{rows, cols / 2}),
                                                Borrowed(*plan.scale, DType::kU8, plan.scale->shape)});
}

Result<HostTensor> SafetensorsCheckpoint::ReadI64(std::string_view name,
                                                  const Shape& expected) const {
  PG_ASSIGN_OR_RETURN(const StoredTensor* w, Require(name));
  if (w->dtype != DType::kI64 && w->dtype != DType::kI32)
    return InvalidArgument(fmt::format("{} has dtype {}; expected I64 or I32", Describe(name, *w),
                                       DTypeSafetensorsName(w->dtype)));
  if (!(w->shape == expected))
    return InvalidArgument(fmt::format("{} has shape {}, expected {}", Describe(name, *w),
                                       w->shape.ToString(), expected.ToString()));
  if (w->dtype == DType::kI64 && IsAligned(w->data, alignof(int64_t)))
    return Borrowed(*w, DType::kI64, w->shape);
  int64_t* dst = nullptr;
  PG_ASSIGN_OR_RETURN(HostTensor out, OwnedTensor(DType::kI64, w->shape, &dst));
  ConvertToI64(w->dtype, w->data, static_cast<size_t>(w->shape.numel()), dst);
  return out;
}

Result<Shape> SafetensorsCheckpoint::LogicalShape(std::string_view name) const {
  PG_ASSIGN_OR_RETURN(const StoredTensor* w, Require(name));
  if (w->dtype == DType::kI64 || w->dtype == DType::kI32 || w->dtype == DType::kBool)
    return w->shape;
  PG_ASSIGN_OR_RETURN(const F32Plan plan, PlanF32(name));
  return plan.logical;
}

std::vector<std::string> SafetensorsCheckpoint::CanonicalNames() const {
  std::vector<std::string> names;
  for (const auto& [name, t] : tensors_) {
    const std::string_view n = name;
    if (n.ends_with(".scale") && Has(fmt::format("{}.weight", n.substr(0, n.size() - 6)))) continue;
    names.push_back(name);
  }
  return names;
}

}  // namespace

Result<std::optional<Fp8BlockTensor>> Checkpoint::ReadFp8Blocks(std::string_view,
                                                                const Shape&) const {
  return std::optional<Fp8BlockTensor>();
}

Result<std::optional<Mxfp4Tensor>> Checkpoint::ReadMxfp4(std::string_view, const Shape&) const {
  return std::optional<Mxfp4Tensor>();
}

Result<std::optional<HostTensor>> Checkpoint::ReadBF16(std::string_view, const Shape&) const {
  return std::optional<HostTensor>();
}

Result<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::filesystem::path& dir) {
  auto checkpoint = std::make_unique<SafetensorsCheckpoint>(dir);
  // Header parsing catches its own exceptions; this guards allocation failures elsewhere.
  try {
    PG_RETURN_IF_ERROR(checkpoint->Load());
  } catch (const std::exception& e) {
    return Internal(fmt::format("{}: loading failed ({})", dir.string(), e.what()));
  }
  return std::unique_ptr<Checkpoint>(std::move(checkpoint));
}

}  // namespace peregrine
