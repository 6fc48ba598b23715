#include "model/deepseek_v4/cuda/device_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/ops/fp8_projection.h"
#include "backend/cuda/ops/fp8_w8a16.h"
#include "backend/cuda/ops/quantize_mxfp4.h"
#include "backend/cuda/ops/random_fill.h"
#include "backend/cuda/uploader.h"
#include "distributed/parallel_config.h"
#include "model/dequant.h"

namespace peregrine::deepseek_v4::cuda {

namespace {

using peregrine::cuda::CachingAllocator;

constexpr int64_t kFp8Block = 128;  // the checkpoint's weight blocks
constexpr int64_t kMxfp4Group = 32;  // inputs sharing one MXFP4 scale

// The part of a stored [R, C] matrix one rank keeps: rows [row0, row0 + rows), columns
// [col0, col0 + cols). Whole(shape) is all of it.
struct Region {
  int64_t row0 = 0, rows = 0, col0 = 0, cols = 0;
  static Region Whole(const Shape& s) { return {0, s[0], 0, s[1]}; }
  static Region RowRange(const Shape& s, distributed::ShardRange r) { return {r.begin, r.size(), 0, s[1]}; }
  static Region ColRange(const Shape& s, distributed::ShardRange c) { return {0, s[0], c.begin, c.size()}; }
  bool whole_rows(const Shape& s) const { return col0 == 0 && cols == s[1]; }
  Shape shape() const { return {rows, cols}; }
  bool Aligned(int64_t row_unit, int64_t col_unit) const {
    return row0 % row_unit == 0 && rows % row_unit == 0 && col0 % col_unit == 0 && cols % col_unit == 0;
  }
};

// Copies `region` of a row-major [*, full_cols] source of `elem` bytes into `out`, contiguous:
// the piece [offset, offset + n) of the region's bytes (an uploader fill).
void CopyRegionPiece(const uint8_t* src, int64_t full_cols, const Region& region, size_t elem, uint8_t* out,
                     size_t offset, size_t n) {
  const size_t row_bytes = static_cast<size_t>(region.cols) * elem;
  while (n > 0) {
    const size_t r = offset / row_bytes, within = offset % row_bytes;
    const size_t take = std::min(n, row_bytes - within);
    const uint8_t* from = src + ((static_cast<size_t>(region.row0) + r) * static_cast<size_t>(full_cols) +
                                 static_cast<size_t>(region.col0)) * elem + within;
    std::memcpy(out, from, take);
    out += take;
    offset += take;
    n -= take;
  }
}

uint64_t HashName(const std::string& name, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ seed;  // FNV-1a
  for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ull;
  return h;
}

// The synthetic seed name of a slice: "name@a,b,...".
std::string SliceKey(const std::string& name, std::initializer_list<int64_t> at) {
  std::string key = name;
  char sep = '@';
  for (int64_t v : at) {
    key += sep;
    key += std::to_string(v);
    sep = ',';
  }
  return key;
}

class Loader {
 public:
  Loader(const Checkpoint& checkpoint, const WeightLoadOptions& options, CachingAllocator& allocator,
         cudaStream_t stream, peregrine::cuda::Uploader& up)
      : checkpoint_(checkpoint), options_(options), allocator_(allocator), stream_(stream), up_(up) {}

  uint64_t bytes() const { return bytes_; }
  size_t fp8_workspace_bytes() const { return fp8_workspace_bytes_; }

  Result<DeviceTensor> Allocate(DType dtype, const Shape& shape) {
    const size_t bytes = DTypeBytes(dtype, static_cast<size_t>(shape.numel()));
    auto buffer = allocator_.Allocate(bytes);
    if (!buffer.ok()) return buffer.status();
    DeviceTensor t;
    t.buffer = std::move(buffer).value();
    t.view = Tensor::Contiguous(t.buffer.data(), dtype, shape, Device::kCuda);
    bytes_ += bytes;
    return t;
  }

  // A vector or table: always read from the checkpoint, kept in f32. `scale` multiplies it.
  Status F32(const std::string& name, const Shape& shape, DeviceTensor* out, float scale = 1.0f) {
    PG_ASSIGN_OR_RETURN(HostTensor host, checkpoint_.ReadF32(name, shape));
    PG_ASSIGN_OR_RETURN(*out, Allocate(DType::kF32, shape));
    std::vector<float> scaled;
    const void* src = host.view.data;
    if (scale != 1.0f) {
      scaled.assign(host.f32(), host.f32() + shape.numel());
      for (float& v : scaled) v *= scale;
      src = scaled.data();
    }
    PG_RETURN_IF_ERROR(up_.Upload(out->view.data, src, static_cast<size_t>(shape.numel()) * 4));
    return Status::Ok();
  }

  // A projection matrix in bf16: `region` of the stored [R, C] `shape` (all of it by
  // default), written at `dst` (stacking experts). Synthetic: uniform with variance 1/C
  // (times `scale`; `positive` folds it to [0, spread)), drawn for the region alone.
  Status Matrix(const std::string& name, const Shape& shape, DeviceTensor* out, float scale = 1.0f,
                bool positive = false) {
    PG_ASSIGN_OR_RETURN(*out, Allocate(DType::kBF16, shape));
    return MatrixInto(name, shape, Region::Whole(shape), out->view.data, scale, positive);
  }

  Status MatrixInto(const std::string& name, const Shape& shape, const Region& region, void* dst, float scale = 1.0f,
                    bool positive = false) {
    const bool whole = region.row0 == 0 && region.rows == shape[0] && region.whole_rows(shape);
    if (options_.synthetic_matrices) {
      const float spread = scale * std::sqrt(3.0f / static_cast<float>(shape[-1]));
      const Tensor t = Tensor::Contiguous(dst, DType::kBF16, region.shape(), Device::kCuda);
      const std::string key = whole ? name : SliceKey(name, {region.row0, region.col0});
      return peregrine::cuda::RandomUniform(t, HashName(key, options_.seed), positive ? 0.0f : -spread, spread,
                                            stream_);
    }
    const size_t bytes = static_cast<size_t>(region.rows * region.cols) * 2;
    // Stored as bf16: uploaded as it is (a row slice borrows, a column slice gathers; or
    // scaled on the way); else read as f32 and narrowed on the way, on the uploader's threads.
    PG_ASSIGN_OR_RETURN(std::optional<HostTensor> stored, checkpoint_.ReadBF16(name, shape));
    const int64_t full_cols = shape[1];
    if (stored.has_value()) {
      const auto* base = static_cast<const uint8_t*>(stored->view.data);
      if (scale == 1.0f && region.whole_rows(shape))
        return up_.Upload(dst, base + static_cast<size_t>(region.row0 * full_cols) * 2, bytes);
      if (scale == 1.0f) {
        return up_.UploadFilled(dst, bytes, [base, full_cols, region](uint8_t* out, size_t offset, size_t n) {
          CopyRegionPiece(base, full_cols, region, 2, out, offset, n);
        }, 2);
      }
      const auto* in = stored->view.as<const uint16_t>();
      return up_.UploadFilled(dst, bytes, [in, scale, full_cols, region](uint8_t* out, size_t offset, size_t n) {
        auto* o = reinterpret_cast<uint16_t*>(out);
        for (size_t i = 0; i < n / 2; ++i) {
          const size_t k = offset / 2 + i;
          const size_t r = k / static_cast<size_t>(region.cols), col = k % static_cast<size_t>(region.cols);
          o[i] = F32ToBF16(BF16ToF32(in[(region.row0 + r) * full_cols + region.col0 + col]) * scale);
        }
      }, 2);
    }
    PG_ASSIGN_OR_RETURN(HostTensor host, checkpoint_.ReadF32(name, shape));
    const float* in = host.f32();
    return up_.UploadFilled(dst, bytes, [in, scale, full_cols, region](uint8_t* out, size_t offset, size_t n) {
      auto* o = reinterpret_cast<uint16_t*>(out);
      for (size_t i = 0; i < n / 2; ++i) {
        const size_t k = offset / 2 + i;
        const size_t r = k / static_cast<size_t>(region.cols), col = k % static_cast<size_t>(region.cols);
        o[i] = F32ToBF16(in[(region.row0 + r) * full_cols + region.col0 + col] * scale);
      }
    }, 2);
  }

  // One stored matrix's part in a stacked projection.
  struct Piece {
    std::string name;
    Shape shape;    // as stored
    Region region;  // the part kept
  };
  static Piece WholePiece(const std::string& name, const Shape& shape) { return {name, shape, Region::Whole(shape)}; }

  // A dense projection stacked (by rows) from `pieces`, all of one width: FP8 (e4m3 + f32
  // block scales) when the options ask for it and the blocks tile every piece, else bf16.
  Status Projection(const std::vector<Piece>& pieces, DeviceProjection* out) {
    int64_t rows = 0;
    const int64_t cols = pieces.front().region.cols;
    bool fp8 = options_.dense_format == DenseFormat::kFP8;
    for (const Piece& p : pieces) {
      rows += p.region.rows;
      fp8 = fp8 && p.region.Aligned(kFp8Block, kFp8Block);
    }
    if (!fp8) {
      PG_ASSIGN_OR_RETURN(out->w, Allocate(DType::kBF16, {rows, cols}));
      char* dst = static_cast<char*>(out->w.view.data);
      for (const Piece& p : pieces) {
        PG_RETURN_IF_ERROR(MatrixInto(p.name, p.shape, p.region, dst));
        dst += p.region.rows * cols * 2;
      }
      return Status::Ok();
    }
    PG_ASSIGN_OR_RETURN(out->w, Allocate(DType::kF8E4M3, {rows, cols}));
    PG_ASSIGN_OR_RETURN(out->scale, Allocate(DType::kF32, {rows / kFp8Block, cols / kFp8Block}));
    auto* codes = static_cast<uint8_t*>(out->w.view.data);
    auto* scales = static_cast<float*>(out->scale.view.data);
    for (const Piece& p : pieces) {
      PG_RETURN_IF_ERROR(Fp8Into(p, codes, scales));
      codes += p.region.rows * cols;
      scales += p.region.rows / kFp8Block * (cols / kFp8Block);
    }
    fp8_workspace_bytes_ = std::max(fp8_workspace_bytes_, peregrine::cuda::Fp8ProjectionWorkspaceBytes(cols, rows));
    return Status::Ok();
  }

  // One FP8 weight's region (block-aligned) into `codes` / `scales` ([rows/128, cols/128]):
  // the checkpoint's own bytes when it stores it as FP8, else its values (or synthetic ones)
  // staged in bf16 and quantised on the device.
  Status Fp8Into(const Piece& p, uint8_t* codes, float* scales) {
    const Region& r = p.region;
    const Shape local = r.shape();
    const Region blocks{r.row0 / kFp8Block, r.rows / kFp8Block, r.col0 / kFp8Block, r.cols / kFp8Block};
    if (!options_.synthetic_matrices) {
      PG_ASSIGN_OR_RETURN(std::optional<Fp8BlockTensor> stored, checkpoint_.ReadFp8Blocks(p.name, p.shape));
      if (stored.has_value()) {
        PG_RETURN_IF_ERROR(UploadRegion(codes, stored->codes.view.data, p.shape[1], r, 1));
        PG_RETURN_IF_ERROR(UploadRegion(scales, stored->scales.view.data, p.shape[1] / kFp8Block, blocks, 4));
        return Status::Ok();
      }
    }
    auto staging = allocator_.Allocate(static_cast<size_t>(local.numel()) * 2);
    if (!staging.ok()) return staging.status();
    PG_RETURN_IF_ERROR(MatrixInto(p.name, p.shape, r, staging->data()));
    PG_RETURN_IF_ERROR(peregrine::cuda::QuantizeFp8Blocks(
        {Tensor::Contiguous(staging->data(), DType::kBF16, local, Device::kCuda),
         Tensor::Contiguous(codes, DType::kF8E4M3, local, Device::kCuda),
         Tensor::Contiguous(scales, DType::kF32, {local[0] / kFp8Block, local[1] / kFp8Block}, Device::kCuda)},
        stream_));
    // The staging block returns to the allocator here; the next upload may reuse it.
    PG_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return Status::Ok();
  }

  // `region` of a row-major host array [*, full_cols] of `elem`-byte elements to `dst`.
  Status UploadRegion(void* dst, const void* src, int64_t full_cols, const Region& region, size_t elem) {
    const auto* base = static_cast<const uint8_t*>(src);
    const size_t bytes = static_cast<size_t>(region.rows * region.cols) * elem;
    if (region.col0 == 0 && region.cols == full_cols)
      return up_.Upload(dst, base + static_cast<size_t>(region.row0 * full_cols) * elem, bytes);
    return up_.UploadFilled(dst, bytes, [base, full_cols, region, elem](uint8_t* out, size_t offset, size_t n) {
      CopyRegionPiece(base, full_cols, region, elem, out, offset, n);
    }, elem);
  }

  // `region` of one expert's weight [R, C] quantised to MXFP4 with the release's rule
  // (QuantizeMxfp4), rows split over the uploader's threads (each widens its rows to f32).
  Status QuantizeExpert(const std::string& name, const Shape& shape, const Region& region,
                        std::vector<uint8_t>* packed, std::vector<uint8_t>* exponents) {
    PG_ASSIGN_OR_RETURN(std::optional<HostTensor> bf16, checkpoint_.ReadBF16(name, shape));
    std::optional<HostTensor> f32;
    if (!bf16.has_value()) {
      PG_ASSIGN_OR_RETURN(HostTensor host, checkpoint_.ReadF32(name, shape));
      f32 = std::move(host);
    }
    const auto n = static_cast<size_t>(region.cols);
    const auto full = static_cast<size_t>(shape[1]);
    packed->assign(static_cast<size_t>(region.rows) * n / 2, 0);
    exponents->assign(static_cast<size_t>(region.rows) * n / kMxfp4Group, 0);
    peregrine::cuda::ParallelRanges(static_cast<size_t>(region.rows), up_.threads(), [&](size_t r0, size_t r1) {
      std::vector<float> widened((r1 - r0) * n);
      for (size_t r = r0; r < r1; ++r) {
        const size_t at = (static_cast<size_t>(region.row0) + r) * full + static_cast<size_t>(region.col0);
        float* row = widened.data() + (r - r0) * n;
        if (bf16.has_value()) {
          const uint16_t* in = bf16->view.as<const uint16_t>() + at;
          for (size_t i = 0; i < n; ++i) row[i] = BF16ToF32(in[i]);
        } else {
          std::memcpy(row, f32->f32() + at, n * 4);
        }
      }
      QuantizeMxfp4(widened.data(), static_cast<int64_t>(r1 - r0), region.cols, packed->data() + r0 * n / 2,
                    exponents->data() + r0 * n / kMxfp4Group);
    });
    return Status::Ok();
  }

  // Routed experts [e0, e0 + e_n), `region` of each [R, C] (`shape`), read into MXFP4
  // [e_n, rows, cols/2] codes + [e_n, rows, cols/32] scales: the checkpoint's own bytes when
  // it stores them as MXFP4 (the release), else its values quantised with the release's rule
  // (QuantizeMxfp4): bf16 ones on the device, others on the host.
  Status Mxfp4Experts(const std::string& fp, const char* which, int64_t e0, int64_t e_n, const Shape& shape,
                      const Region& region, const DeviceTensor& codes, const DeviceTensor& scales) {
    const int64_t rows = region.rows, cols = region.cols;
    const size_t code_bytes = static_cast<size_t>(rows * cols / 2);
    const size_t scale_bytes = static_cast<size_t>(rows * cols / kMxfp4Group);
    const Region code_region{region.row0, rows, region.col0 / 2, cols / 2};
    const Region scale_region{region.row0, rows, region.col0 / kMxfp4Group, cols / kMxfp4Group};
    std::vector<uint8_t> packed, exponents;
    peregrine::cuda::DeviceBuffer staging;  // bf16 experts, quantised on the device
    for (int64_t x = 0; x < e_n; ++x) {
      const std::string name = fp + "experts." + std::to_string(e0 + x) + "." + which + ".weight";
      char* code_dst = static_cast<char*>(codes.view.data) + static_cast<size_t>(x) * code_bytes;
      char* scale_dst = static_cast<char*>(scales.view.data) + static_cast<size_t>(x) * scale_bytes;
      PG_ASSIGN_OR_RETURN(std::optional<HostTensor> bf16, checkpoint_.ReadBF16(name, shape));
      if (bf16.has_value()) {
        // Uploaded as stored and quantised there, in order on the stream (the next expert's
        // upload into the same staging waits for this one's kernel).
        if (staging.empty()) {
          PG_ASSIGN_OR_RETURN(staging, allocator_.Allocate(static_cast<size_t>(rows * cols) * 2));
        }
        PG_RETURN_IF_ERROR(UploadRegion(staging.data(), bf16->view.data, shape[1], region, 2));
        PG_RETURN_IF_ERROR(peregrine::cuda::QuantizeMxfp4(
            {Tensor::Contiguous(staging.data(), DType::kBF16, {rows, cols}, Device::kCuda),
             Tensor::Contiguous(code_dst, DType::kU8, {rows, cols / 2}, Device::kCuda),
             Tensor::Contiguous(scale_dst, DType::kU8, {rows, cols / kMxfp4Group}, Device::kCuda)},
            stream_));
        continue;
      }
      PG_ASSIGN_OR_RETURN(std::optional<Mxfp4Tensor> stored, checkpoint_.ReadMxfp4(name, shape));
      if (stored.has_value()) {
        PG_RETURN_IF_ERROR(UploadRegion(code_dst, stored->codes.view.data, shape[1] / 2, code_region, 1));
        PG_RETURN_IF_ERROR(
            UploadRegion(scale_dst, stored->scales.view.data, shape[1] / kMxfp4Group, scale_region, 1));
        continue;
      }
      PG_RETURN_IF_ERROR(QuantizeExpert(name, shape, region, &packed, &exponents));
      PG_RETURN_IF_ERROR(up_.Upload(code_dst, packed.data(), code_bytes));
      PG_RETURN_IF_ERROR(up_.Upload(scale_dst, exponents.data(), scale_bytes));
    }
    return Status::Ok();
  }

  // Routed experts [e0, e0 + e_n) of layer prefix `fp`, `region` of each stored [R, C]
  // (`shape`), stacked into [e_n, rows, cols].
  Status Experts(const std::string& fp, const char* which, int64_t e0, int64_t e_n, const Shape& shape,
                 const Region& region, DeviceTensor* out, DeviceTensor* scale_out) {
    const std::string stacked = fp + "experts." + which;
    const int64_t rows = region.rows, cols = region.cols;
    if (options_.expert_format == ExpertFormat::kMXFP4) {
      if (!region.Aligned(1, kMxfp4Group))
        return InvalidArgument(stacked + ": MXFP4 needs the input width (and each rank's part of it) to be a "
                               "multiple of 32");
      PG_ASSIGN_OR_RETURN(*out, Allocate(DType::kU8, {e_n, rows, cols / 2}));
      PG_ASSIGN_OR_RETURN(*scale_out, Allocate(DType::kU8, {e_n, rows, cols / kMxfp4Group}));
      if (!options_.synthetic_matrices) return Mxfp4Experts(fp, which, e0, e_n, shape, region, *out, *scale_out);
      const std::string key = e0 == 0 && region.rows == shape[0] && region.cols == shape[1]
                                  ? stacked
                                  : SliceKey(stacked, {e0, region.row0, region.col0});
      PG_RETURN_IF_ERROR(peregrine::cuda::RandomBytes(out->view, HashName(key, options_.seed), 0, 255, stream_));
      // e2m1 codes drawn uniformly have an rms of ~2.93: pick the power of two nearest to
      // 1 / (2.93 sqrt(C)) so outputs keep unit scale, and jitter it by one binade.
      const int center =
          127 + static_cast<int>(std::lround(std::log2(1.0 / (2.93 * std::sqrt(static_cast<double>(shape[1]))))));
      return peregrine::cuda::RandomBytes(scale_out->view, HashName(key + ".scale", options_.seed), center - 1,
                                          center + 1, stream_);
    }
    PG_ASSIGN_OR_RETURN(*out, Allocate(DType::kBF16, {e_n, rows, cols}));
    if (options_.synthetic_matrices) {
      const std::string key = e0 == 0 && region.rows == shape[0] && region.cols == shape[1]
                                  ? stacked
                                  : SliceKey(stacked, {e0, region.row0, region.col0});
      const float spread = std::sqrt(3.0f / static_cast<float>(shape[1]));
      return peregrine::cuda::RandomUniform(out->view, HashName(key, options_.seed), -spread, spread, stream_);
    }
    for (int64_t x = 0; x < e_n; ++x) {
      char* dst = static_cast<char*>(out->view.data) + x * rows * cols * 2;
      PG_RETURN_IF_ERROR(
          MatrixInto(fp + "experts." + std::to_string(e0 + x) + "." + which + ".weight", shape, region, dst));
    }
    return Status::Ok();
  }

  Status HashTable(const std::string& name, const Shape& shape, int64_t num_experts, DeviceTensor* out) {
    PG_ASSIGN_OR_RETURN(HostTensor host, checkpoint_.ReadI64(name, shape));
    std::vector<int32_t> ids(static_cast<size_t>(shape.numel()));
    for (size_t i = 0; i < ids.size(); ++i) {
      const int64_t id = host.i64()[i];
      if (id < 0 || id >= num_experts) return InvalidArgument(name + " holds an expert id out of range");
      ids[i] = static_cast<int32_t>(id);
    }
    PG_ASSIGN_OR_RETURN(*out, Allocate(DType::kI32, shape));
    PG_RETURN_IF_ERROR(up_.Upload(out->view.data, ids.data(), ids.size() * 4));
    return Status::Ok();
  }

  Status Hc(const std::string& prefix, int64_t mixes, int64_t flat, int64_t scales, DeviceHyperConnection* hc) {
    PG_RETURN_IF_ERROR(F32(prefix + "fn", {mixes, flat}, &hc->fn));
    PG_RETURN_IF_ERROR(F32(prefix + "base", {mixes}, &hc->base));
    return F32(prefix + "scale", {scales}, &hc->scale);
  }

  Status Compressor(const std::string& prefix, int64_t ratio, bool overlap, int64_t dim, int64_t hidden,
                    DeviceCompressor* c) {
    c->ratio = ratio;
    c->dim = dim;
    c->coff = overlap ? 2 : 1;
    const int64_t width = c->coff * dim;
    // wkv and wgate stacked, so one grouped projection computes both.
    const Shape shape{width, hidden};
    PG_ASSIGN_OR_RETURN(c->wkv_wgate, Allocate(DType::kBF16, {2, width, hidden}));
    char* const both = static_cast<char*>(c->wkv_wgate.view.data);
    const size_t bytes = static_cast<size_t>(shape.numel()) * 2;
    PG_RETURN_IF_ERROR(MatrixInto(prefix + "wkv.weight", shape, Region::Whole(shape), both));
    PG_RETURN_IF_ERROR(MatrixInto(prefix + "wgate.weight", shape, Region::Whole(shape), both + bytes));
    PG_RETURN_IF_ERROR(F32(prefix + "ape", {ratio, width}, &c->ape));
    return F32(prefix + "norm.weight", {dim}, &c->norm);
  }

  // Layer i of `c` under "layers.<i>.", or under `prefix` (an MTP layer's "mtp.<n>.").
  Status Layer(const ModelConfig& c, int64_t i, DeviceLayer* l, const std::string& prefix = {}) {
    const ShardSpec& sh = options_.shard;
    const std::string p = prefix.empty() ? "layers." + std::to_string(i) + "." : prefix;
    const int64_t d = c.hidden_size;
    const int64_t hc = c.hc_mult;
    const int64_t hd = c.head_dim;
    PG_RETURN_IF_ERROR(F32(p + "attn_norm.weight", {d}, &l->attn_norm));
    PG_RETURN_IF_ERROR(F32(p + "ffn_norm.weight", {d}, &l->ffn_norm));
    PG_RETURN_IF_ERROR(Hc(p + "hc_attn_", (2 + hc) * hc, hc * d, 3, &l->hc_attn));
    PG_RETURN_IF_ERROR(Hc(p + "hc_ffn_", (2 + hc) * hc, hc * d, 3, &l->hc_ffn));

    // This rank's heads: whole output groups (G % size == 0) or part of one (size % G == 0);
    // its wo_a block is those groups' rows and its heads' columns, its wo_b those groups' columns.
    const std::string ap = p + "attn.";
    const distributed::ShardRange heads = distributed::EvenShard(c.num_heads, sh.rank, sh.size);
    const int64_t per_group = c.num_heads / c.o_groups;
    const int64_t g0 = heads.begin / per_group, g1 = (heads.end + per_group - 1) / per_group;
    const int64_t col0 = (heads.begin - g0 * per_group) * hd;
    const int64_t group_cols = std::min(heads.size(), per_group) * hd;
    const int64_t r = c.o_lora_rank;
    PG_RETURN_IF_ERROR(Projection({WholePiece(ap + "wq_a.weight", {c.q_lora_rank, d})}, &l->wq_a));
    PG_RETURN_IF_ERROR(F32(ap + "q_norm.weight", {c.q_lora_rank}, &l->q_norm));
    const Shape wq_b{c.num_heads * hd, c.q_lora_rank};
    PG_RETURN_IF_ERROR(Projection({{ap + "wq_b.weight", wq_b, Region{heads.begin * hd, heads.size() * hd, 0, wq_b[1]}}},
                                  &l->wq_b));
    PG_RETURN_IF_ERROR(Projection({WholePiece(ap + "wkv.weight", {hd, d})}, &l->wkv));
    PG_RETURN_IF_ERROR(F32(ap + "kv_norm.weight", {hd}, &l->kv_norm));
    const Shape wo_a{c.o_groups * r, c.num_heads * hd / c.o_groups};
    PG_ASSIGN_OR_RETURN(l->wo_a, Allocate(DType::kBF16, {(g1 - g0) * r, group_cols}));
    PG_RETURN_IF_ERROR(MatrixInto(ap + "wo_a.weight", wo_a, Region{g0 * r, (g1 - g0) * r, col0, group_cols},
                                  l->wo_a.view.data));
    l->wo_a.view = Tensor::Contiguous(l->wo_a.view.data, DType::kBF16, {g1 - g0, r, group_cols}, Device::kCuda);
    const Shape wo_b{d, c.o_groups * r};
    PG_RETURN_IF_ERROR(
        Projection({{ap + "wo_b.weight", wo_b, Region{0, d, g0 * r, (g1 - g0) * r}}}, &l->wo_b));
    PG_RETURN_IF_ERROR(F32Rows(ap + "attn_sink", c.num_heads, heads, &l->sink));
    const int64_t ratio = c.CompressRatio(i);
    const bool is_csa = c.layer_types[static_cast<size_t>(i)] == AttentionType::kCompressedSparse;
    if (ratio > 0) {
      l->compressor.emplace();
      PG_RETURN_IF_ERROR(Compressor(ap + "compressor.", ratio, is_csa, hd, d, &*l->compressor));
    }
    if (is_csa) {
      PG_RETURN_IF_ERROR(Projection(
          {WholePiece(ap + "indexer.wq_b.weight", {c.index_n_heads * c.index_head_dim, c.q_lora_rank})},
          &l->index_wq_b));
      const float weight_scale = 1.0f / std::sqrt(static_cast<float>(c.index_n_heads));
      PG_RETURN_IF_ERROR(Matrix(ap + "indexer.weights_proj.weight", {c.index_n_heads, d}, &l->index_weights_proj,
                                weight_scale, /*positive=*/true));
      l->index_compressor.emplace();
      PG_RETURN_IF_ERROR(
          Compressor(ap + "indexer.compressor.", ratio, true, c.index_head_dim, d, &*l->index_compressor));
    }

    // Routed experts: whole ones of this rank's range (EP) or every expert's intermediate
    // slice; the shared expert's intermediate slice.
    const std::string fp = p + "ffn.";
    const int64_t e = c.num_experts;
    const int64_t inter = c.moe_intermediate_size;
    PG_RETURN_IF_ERROR(Matrix(fp + "gate.weight", {e, d}, &l->gate));
    if (c.mlp_layer_types[static_cast<size_t>(i)] == MoeType::kHash) {
      PG_RETURN_IF_ERROR(HashTable(fp + "gate.tid2eid", {c.vocab_size, c.num_experts_per_tok}, e, &l->tid2eid));
    } else {
      PG_RETURN_IF_ERROR(F32(fp + "gate.bias", {e}, &l->bias));
    }
    l->experts.format = options_.expert_format;
    const distributed::ShardRange local =
        sh.expert_parallel ? distributed::EvenShard(e, sh.rank, sh.size) : distributed::ShardRange{0, e};
    const distributed::ShardRange part =
        sh.expert_parallel ? distributed::ShardRange{0, inter} : distributed::EvenShard(inter, sh.rank, sh.size);
    const Shape up{inter, d}, down{d, inter};
    PG_RETURN_IF_ERROR(Experts(fp, "w1", local.begin, local.size(), up, Region::RowRange(up, part), &l->experts.w1,
                               &l->experts.w1_scale));
    PG_RETURN_IF_ERROR(Experts(fp, "w3", local.begin, local.size(), up, Region::RowRange(up, part), &l->experts.w3,
                               &l->experts.w3_scale));
    PG_RETURN_IF_ERROR(Experts(fp, "w2", local.begin, local.size(), down, Region::ColRange(down, part),
                               &l->experts.w2, &l->experts.w2_scale));
    const int64_t shared = inter * c.num_shared_experts;
    const distributed::ShardRange sp = distributed::EvenShard(shared, sh.rank, sh.size);
    const Shape s_up{shared, d}, s_down{d, shared};
    PG_RETURN_IF_ERROR(Projection({{fp + "shared_experts.w1.weight", s_up, Region::RowRange(s_up, sp)},
                                   {fp + "shared_experts.w3.weight", s_up, Region::RowRange(s_up, sp)}},
                                  &l->shared_w13));
    return Projection({{fp + "shared_experts.w2.weight", s_down, Region::ColRange(s_down, sp)}}, &l->shared_w2);
  }

  // Rows `part` of an f32 vector [n].
  Status F32Rows(const std::string& name, int64_t n, distributed::ShardRange part, DeviceTensor* out) {
    PG_ASSIGN_OR_RETURN(HostTensor host, checkpoint_.ReadF32(name, {n}));
    PG_ASSIGN_OR_RETURN(*out, Allocate(DType::kF32, {part.size()}));
    return up_.Upload(out->view.data, host.f32() + part.begin, static_cast<size_t>(part.size()) * 4);
  }

  // The head's rows of this rank (PaddedShard of the vocabulary), padded with zero rows to
  // ceil(vocab / size).
  Status Head(const ModelConfig& c, DeviceTensor* out) {
    const ShardSpec& sh = options_.shard;
    const Shape shape{c.vocab_size, c.hidden_size};
    if (sh.is_whole()) return Matrix("head.weight", shape, out);
    const distributed::ShardRange v = distributed::PaddedShard(c.vocab_size, sh.rank, sh.size);
    const int64_t rows = distributed::PaddedShard(c.vocab_size, 0, sh.size).size();
    PG_ASSIGN_OR_RETURN(*out, Allocate(DType::kBF16, {rows, c.hidden_size}));
    PG_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(out->view.data, 0, out->buffer.bytes(), stream_));
    if (v.size() == 0) return Status::Ok();
    return MatrixInto("head.weight", shape, Region::RowRange(shape, v), out->view.data);
  }

 private:
  const Checkpoint& checkpoint_;
  const WeightLoadOptions& options_;
  CachingAllocator& allocator_;
  cudaStream_t stream_;
  peregrine::cuda::Uploader& up_;  // every host-to-device copy, in order on stream_
  uint64_t bytes_ = 0;
  size_t fp8_workspace_bytes_ = 0;
};

}  // namespace

Result<DeviceMtp> LoadDeviceMtp(const ModelConfig& c, const Checkpoint& checkpoint, const WeightLoadOptions& options,
                                CachingAllocator& allocator, cudaStream_t stream) {
  if (c.num_nextn_predict_layers < 1 || !checkpoint.Has("mtp.0.e_proj.weight"))
    return NotFound("the checkpoint has no MTP layer (mtp.0.e_proj.weight)");
  PG_ASSIGN_OR_RETURN(std::unique_ptr<peregrine::cuda::Uploader> up,
                      peregrine::cuda::Uploader::Create(stream, size_t{64} << 20));
  Loader ld(checkpoint, options, allocator, stream, *up);
  const int64_t d = c.hidden_size;
  DeviceMtp m;
  PG_RETURN_IF_ERROR(ld.F32("mtp.0.enorm.weight", {d}, &m.enorm));
  PG_RETURN_IF_ERROR(ld.F32("mtp.0.hnorm.weight", {d}, &m.hnorm));
  PG_RETURN_IF_ERROR(ld.F32("mtp.0.norm.weight", {d}, &m.norm));
  PG_RETURN_IF_ERROR(ld.Matrix("mtp.0.e_proj.weight", {d, d}, &m.e_proj));
  PG_RETURN_IF_ERROR(ld.Matrix("mtp.0.h_proj.weight", {d, d}, &m.h_proj));
  PG_RETURN_IF_ERROR(ld.Hc("mtp.0.hc_head_", c.hc_mult, c.hc_mult * d, 1, &m.hc_head));
  PG_RETURN_IF_ERROR(ld.Layer(MtpLayerConfig(c), 0, &m.layer, "mtp.0."));
  // Its projections have the main layers' shapes: their FP8 scratch serves it.
  PG_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  m.bytes = ld.bytes();
  return m;
}

Result<DeviceBlockDrafter> LoadDeviceBlockDrafter(const ModelConfig& c, const Checkpoint& checkpoint,
                                                  const WeightLoadOptions& options, CachingAllocator& allocator,
                                                  cudaStream_t stream) {
  if (!c.has_block_drafter() || c.num_nextn_predict_layers < 1 || !checkpoint.Has("mtp.0.main_proj.weight"))
    return NotFound("the checkpoint has no block drafter (mtp.0.main_proj.weight)");
  PG_ASSIGN_OR_RETURN(std::unique_ptr<peregrine::cuda::Uploader> up,
                      peregrine::cuda::Uploader::Create(stream, size_t{64} << 20));
  Loader ld(checkpoint, options, allocator, stream, *up);
  const int64_t d = c.hidden_size, stages = c.num_nextn_predict_layers;
  const auto taps = static_cast<int64_t>(c.dspark_target_layer_ids.size());
  DeviceBlockDrafter b;
  PG_RETURN_IF_ERROR(ld.Matrix("mtp.0.main_proj.weight", {d, taps * d}, &b.main_proj));
  PG_RETURN_IF_ERROR(ld.F32("mtp.0.main_norm.weight", {d}, &b.main_norm));
  const ModelConfig dc = BlockDrafterConfig(c);
  b.stages.resize(static_cast<size_t>(stages));
  for (int64_t s = 0; s < stages; ++s)
    PG_RETURN_IF_ERROR(ld.Layer(dc, s, &b.stages[static_cast<size_t>(s)], "mtp." + std::to_string(s) + "."));
  const std::string last = "mtp." + std::to_string(stages - 1) + ".";
  PG_RETURN_IF_ERROR(ld.F32(last + "norm.weight", {d}, &b.norm));
  PG_RETURN_IF_ERROR(ld.Hc(last + "hc_head_", c.hc_mult, c.hc_mult * d, 1, &b.hc_head));
  // The Markov tables are stored bare or as a module's weight.
  const Shape markov{c.vocab_size, c.dspark_markov_rank};
  const std::string mp = last + "markov_head.";
  for (auto [name, out] : {std::pair{std::string("markov_w1"), &b.markov_w1}, std::pair{std::string("markov_w2"), &b.markov_w2}}) {
    const std::string bare = mp + name;
    PG_RETURN_IF_ERROR(ld.Matrix(checkpoint.Has(bare) ? bare : bare + ".weight", markov, out));
  }
  PG_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  b.bytes = ld.bytes();
  return b;
}

Result<DeviceWeights> LoadDeviceWeights(const ModelConfig& c, const Checkpoint& checkpoint,
                                        const WeightLoadOptions& options, CachingAllocator& allocator,
                                        cudaStream_t stream) {
  // Synthetic weights are generated on the device: the uploader's buffers stay small.
  PG_ASSIGN_OR_RETURN(std::unique_ptr<peregrine::cuda::Uploader> up,
                      peregrine::cuda::Uploader::Create(stream, options.synthetic_matrices ? size_t{1} << 20 : size_t{64} << 20));
  Loader ld(checkpoint, options, allocator, stream, *up);
  DeviceWeights w;
  PG_RETURN_IF_ERROR(ld.Matrix("embed.weight", {c.vocab_size, c.hidden_size}, &w.embed));
  PG_RETURN_IF_ERROR(ValidateShard(c, options.shard));
  const ShardSpec& shard = options.shard;
  if (!shard.is_whole() && !shard.expert_parallel && (c.moe_intermediate_size / shard.size) % 32 != 0)
    return InvalidArgument("the CUDA MoE kernels need each rank's part of moe_intermediate_size (" +
                           std::to_string(c.moe_intermediate_size) + " / " + std::to_string(shard.size) +
                           ") to be a multiple of 32: partition the experts instead (--ep) or use fewer ranks");
  PG_RETURN_IF_ERROR(ld.Head(c, &w.head));
  PG_RETURN_IF_ERROR(ld.F32("norm.weight", {c.hidden_size}, &w.norm));
  PG_RETURN_IF_ERROR(ld.Hc("hc_head_", c.hc_mult, c.hc_mult * c.hidden_size, 1, &w.hc_head));
  const int64_t parts = c.num_layers + 1;
  if (options.on_progress) options.on_progress(1, parts, ld.bytes());
  w.layers.resize(static_cast<size_t>(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    PG_RETURN_IF_ERROR(ld.Layer(c, i, &w.layers[static_cast<size_t>(i)]));
    if (options.on_progress) options.on_progress(i + 2, parts, ld.bytes());
  }
  if (ld.fp8_workspace_bytes() > 0) {
    PG_ASSIGN_OR_RETURN(w.fp8_workspace, ld.Allocate(DType::kU8, {static_cast<int64_t>(ld.fp8_workspace_bytes())}));
  }
  PG_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  w.bytes = ld.bytes();
  const ShardSpec& sh = options.shard;
  const distributed::ShardRange heads = distributed::EvenShard(c.num_heads, sh.rank, sh.size);
  w.heads = heads.size();
  w.groups = std::max<int64_t>(1, c.o_groups / sh.size);
  const distributed::ShardRange experts =
      sh.expert_parallel ? distributed::EvenShard(c.num_experts, sh.rank, sh.size) : distributed::ShardRange{0, c.num_experts};
  w.expert_begin = experts.begin;
  w.experts = experts.size();
  w.head_rows = w.head.view.shape[0];
  return w;
}

}  // namespace peregrine::deepseek_v4::cuda
