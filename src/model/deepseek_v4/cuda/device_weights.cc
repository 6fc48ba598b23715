#include "model/deepseek_v4/cuda/device_weights.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/ops/fp8_projection.h"
#include "backend/cuda/ops/fp8_w8a16.h"
#include "backend/cuda/ops/quantize_mxfp4.h"
#include "backend/cuda/ops/random_fill.h"
#include "backend/cuda/uploader.h"
#include "model/dequant.h"

namespace peregrine::deepseek_v4::cuda {

namespace {

using peregrine::cuda::CachingAllocator;

constexpr int64_t kFp8Block = 128;  // the checkpoint's weight blocks

uint64_t HashName(const std::string& name, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ seed;  // FNV-1a
  for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ull;
  return h;
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

  // A projection matrix [rows, cols] in bf16 (written at `row_offset` rows into `dst` when
  // stacking experts). Synthetic: uniform with variance 1/cols (times `scale`; `positive`
  // folds it to [0, spread)).
  Status Matrix(const std::string& name, const Shape& shape, DeviceTensor* out, float scale = 1.0f,
                bool positive = false) {
    PG_ASSIGN_OR_RETURN(*out, Allocate(DType::kBF16, shape));
    return MatrixInto(name, shape, out->view.data, scale, positive);
  }

  Status MatrixInto(const std::string& name, const Shape& shape, void* dst, float scale = 1.0f, bool positive = false) {
    if (options_.synthetic_matrices) {
      const float spread = scale * std::sqrt(3.0f / static_cast<float>(shape[-1]));
      const Tensor t = Tensor::Contiguous(dst, DType::kBF16, shape, Device::kCuda);
      return peregrine::cuda::RandomUniform(t, HashName(name, options_.seed), positive ? 0.0f : -spread, spread,
                                            stream_);
    }
    const size_t bytes = static_cast<size_t>(shape.numel()) * 2;
    // Stored as bf16: uploaded as it is (or scaled on the way); else read as f32 and narrowed
    // on the way, on the uploader's threads.
    PG_ASSIGN_OR_RETURN(std::optional<HostTensor> stored, checkpoint_.ReadBF16(name, shape));
    if (stored.has_value()) {
      if (scale == 1.0f) return up_.Upload(dst, stored->view.data, bytes);
      const auto* in = stored->view.as<const uint16_t>();
      return up_.UploadFilled(dst, bytes, [in, scale](uint8_t* out, size_t offset, size_t n) {
        auto* o = reinterpret_cast<uint16_t*>(out);
        for (size_t i = 0; i < n / 2; ++i) o[i] = F32ToBF16(BF16ToF32(in[offset / 2 + i]) * scale);
      }, 2);
    }
    PG_ASSIGN_OR_RETURN(HostTensor host, checkpoint_.ReadF32(name, shape));
    const float* in = host.f32();
    return up_.UploadFilled(dst, bytes, [in, scale](uint8_t* out, size_t offset, size_t n) {
      auto* o = reinterpret_cast<uint16_t*>(out);
      for (size_t i = 0; i < n / 2; ++i) o[i] = F32ToBF16(in[offset / 2 + i] * scale);
    }, 2);
  }

  // A dense projection stacked from `names`, each [part_rows, cols]: FP8 (e4m3 + f32 block
  // scales) when the options ask for it and the blocks tile the shape, else bf16.
  Status Projection(const std::vector<std::string>& names, int64_t part_rows, int64_t cols, DeviceProjection* out) {
    const auto parts = static_cast<int64_t>(names.size());
    const int64_t rows = part_rows * parts;
    const bool fp8 = options_.dense_format == DenseFormat::kFP8 && part_rows % kFp8Block == 0 &&
                     cols % kFp8Block == 0;
    if (!fp8) {
      PG_ASSIGN_OR_RETURN(out->w, Allocate(DType::kBF16, {rows, cols}));
      char* dst = static_cast<char*>(out->w.view.data);
      for (int64_t i = 0; i < parts; ++i)
        PG_RETURN_IF_ERROR(MatrixInto(names[static_cast<size_t>(i)], {part_rows, cols}, dst + i * part_rows * cols * 2));
      return Status::Ok();
    }
    PG_ASSIGN_OR_RETURN(out->w, Allocate(DType::kF8E4M3, {rows, cols}));
    PG_ASSIGN_OR_RETURN(out->scale, Allocate(DType::kF32, {rows / kFp8Block, cols / kFp8Block}));
    const int64_t part_blocks = part_rows / kFp8Block * (cols / kFp8Block);
    for (int64_t i = 0; i < parts; ++i) {
      PG_RETURN_IF_ERROR(Fp8Into(names[static_cast<size_t>(i)], {part_rows, cols},
                                 static_cast<uint8_t*>(out->w.view.data) + i * part_rows * cols,
                                 static_cast<float*>(out->scale.view.data) + i * part_blocks));
    }
    fp8_workspace_bytes_ = std::max(fp8_workspace_bytes_, peregrine::cuda::Fp8ProjectionWorkspaceBytes(cols, rows));
    return Status::Ok();
  }

  // One FP8 weight [rows, cols] into `codes` / `scales` ([rows/128, cols/128]): the
  // checkpoint's own bytes when it stores it as FP8, else its values (or synthetic ones)
  // staged in bf16 and quantised on the device.
  Status Fp8Into(const std::string& name, const Shape& shape, uint8_t* codes, float* scales) {
    const int64_t blocks = shape[0] / kFp8Block * (shape[1] / kFp8Block);
    if (!options_.synthetic_matrices) {
      PG_ASSIGN_OR_RETURN(std::optional<Fp8BlockTensor> stored, checkpoint_.ReadFp8Blocks(name, shape));
      if (stored.has_value()) {
        PG_RETURN_IF_ERROR(up_.Upload(codes, stored->codes.view.data, static_cast<size_t>(shape.numel())));
        PG_RETURN_IF_ERROR(up_.Upload(scales, stored->scales.view.data, static_cast<size_t>(blocks) * 4));
        return Status::Ok();
      }
    }
    auto staging = allocator_.Allocate(static_cast<size_t>(shape.numel()) * 2);
    if (!staging.ok()) return staging.status();
    PG_RETURN_IF_ERROR(MatrixInto(name, shape, staging->data()));
    PG_RETURN_IF_ERROR(peregrine::cuda::QuantizeFp8Blocks(
        {Tensor::Contiguous(staging->data(), DType::kBF16, shape, Device::kCuda),
         Tensor::Contiguous(codes, DType::kF8E4M3, shape, Device::kCuda),
         Tensor::Contiguous(scales, DType::kF32, {shape[0] / kFp8Block, shape[1] / kFp8Block}, Device::kCuda)},
        stream_));
    // The staging block returns to the allocator here; the next upload may reuse it.
    PG_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return Status::Ok();
  }

  // One expert's weight [rows, cols] quantised to MXFP4 with the release's rule
  // (QuantizeMxfp4), rows split over the uploader's threads (bf16 rows widened per thread).
  Status QuantizeExpert(const std::string& name, int64_t rows, int64_t cols, std::vector<uint8_t>* packed,
                        std::vector<uint8_t>* exponents) {
    PG_ASSIGN_OR_RETURN(std::optional<HostTensor> bf16, checkpoint_.ReadBF16(name, {rows, cols}));
    std::optional<HostTensor> f32;
    if (!bf16.has_value()) {
      PG_ASSIGN_OR_RETURN(HostTensor host, checkpoint_.ReadF32(name, {rows, cols}));
      f32 = std::move(host);
    }
    packed->assign(static_cast<size_t>(rows * cols / 2), 0);
    exponents->assign(static_cast<size_t>(rows * cols / 32), 0);
    const auto n = static_cast<size_t>(cols);
    peregrine::cuda::ParallelRanges(static_cast<size_t>(rows), up_.threads(), [&](size_t r0, size_t r1) {
      std::vector<float> widened;
      const float* src = nullptr;
      if (bf16.has_value()) {
        const uint16_t* in = bf16->view.as<const uint16_t>() + r0 * n;
        widened.resize((r1 - r0) * n);
        for (size_t i = 0; i < widened.size(); ++i) widened[i] = BF16ToF32(in[i]);
        src = widened.data();
      } else {
        src = f32->f32() + r0 * n;
      }
      QuantizeMxfp4(src, static_cast<int64_t>(r1 - r0), cols, packed->data() + r0 * n / 2,
                    exponents->data() + r0 * n / 32);
    });
    return Status::Ok();
  }

  // Routed experts read into MXFP4 [E, rows, cols/2] codes + [E, rows, cols/32] scales: the
  // checkpoint's own bytes when it stores them as MXFP4 (the release), else its values
  // quantised with the release's rule (QuantizeMxfp4): bf16 ones on the device, others on
  // the host.
  Status Mxfp4Experts(const std::string& fp, const char* which, int64_t e_n, int64_t rows, int64_t cols,
                      const DeviceTensor& codes, const DeviceTensor& scales) {
    const size_t code_bytes = static_cast<size_t>(rows * cols / 2), scale_bytes = static_cast<size_t>(rows * cols / 32);
    std::vector<uint8_t> packed, exponents;
    peregrine::cuda::DeviceBuffer staging;  // bf16 experts, quantised on the device
    for (int64_t x = 0; x < e_n; ++x) {
      const std::string name = fp + "experts." + std::to_string(x) + "." + which + ".weight";
      char* code_dst = static_cast<char*>(codes.view.data) + static_cast<size_t>(x) * code_bytes;
      char* scale_dst = static_cast<char*>(scales.view.data) + static_cast<size_t>(x) * scale_bytes;
      PG_ASSIGN_OR_RETURN(std::optional<HostTensor> bf16, checkpoint_.ReadBF16(name, {rows, cols}));
      if (bf16.has_value()) {
        // Uploaded as stored and quantised there, in order on the stream (the next expert's
        // upload into the same staging waits for this one's kernel).
        if (staging.empty()) {
          PG_ASSIGN_OR_RETURN(staging, allocator_.Allocate(static_cast<size_t>(rows * cols) * 2));
        }
        PG_RETURN_IF_ERROR(up_.Upload(staging.data(), bf16->view.data, static_cast<size_t>(rows * cols) * 2));
        PG_RETURN_IF_ERROR(peregrine::cuda::QuantizeMxfp4(
            {Tensor::Contiguous(staging.data(), DType::kBF16, {rows, cols}, Device::kCuda),
             Tensor::Contiguous(code_dst, DType::kU8, {rows, cols / 2}, Device::kCuda),
             Tensor::Contiguous(scale_dst, DType::kU8, {rows, cols / 32}, Device::kCuda)},
            stream_));
        continue;
      }
      PG_ASSIGN_OR_RETURN(std::optional<Mxfp4Tensor> stored, checkpoint_.ReadMxfp4(name, {rows, cols}));
      const void* code_src = nullptr;
      const void* scale_src = nullptr;
      if (stored.has_value()) {
        code_src = stored->codes.view.data;
        scale_src = stored->scales.view.data;
      } else {
        PG_RETURN_IF_ERROR(QuantizeExpert(name, rows, cols, &packed, &exponents));
        code_src = packed.data();
        scale_src = exponents.data();
      }
      PG_RETURN_IF_ERROR(up_.Upload(code_dst, code_src, code_bytes));
      PG_RETURN_IF_ERROR(up_.Upload(scale_dst, scale_src, scale_bytes));
    }
    return Status::Ok();
  }

  // Routed experts of layer prefix `fp` stacked into [E, rows, cols].
  Status Experts(const std::string& fp, const char* which, int64_t e_n, int64_t rows, int64_t cols, DeviceTensor* out,
                 DeviceTensor* scale_out) {
    const std::string stacked = fp + "experts." + which;
    if (options_.expert_format == ExpertFormat::kMXFP4) {
      if (cols % 32 != 0) return InvalidArgument(stacked + ": MXFP4 needs the input width to be a multiple of 32");
      PG_ASSIGN_OR_RETURN(*out, Allocate(DType::kU8, {e_n, rows, cols / 2}));
      PG_ASSIGN_OR_RETURN(*scale_out, Allocate(DType::kU8, {e_n, rows, cols / 32}));
      if (!options_.synthetic_matrices) return Mxfp4Experts(fp, which, e_n, rows, cols, *out, *scale_out);
      PG_RETURN_IF_ERROR(peregrine::cuda::RandomBytes(out->view, HashName(stacked, options_.seed), 0, 255, stream_));
      // e2m1 codes drawn uniformly have an rms of ~2.93: pick the power of two nearest to
      // 1 / (2.93 sqrt(cols)) so outputs keep unit scale, and jitter it by one binade.
      const int center = 127 + static_cast<int>(std::lround(std::log2(1.0 / (2.93 * std::sqrt(static_cast<double>(cols))))));
      return peregrine::cuda::RandomBytes(scale_out->view, HashName(stacked + ".scale", options_.seed), center - 1,
                                          center + 1, stream_);
    }
    PG_ASSIGN_OR_RETURN(*out, Allocate(DType::kBF16, {e_n, rows, cols}));
    if (options_.synthetic_matrices) return MatrixInto(stacked, {e_n, rows, cols}, out->view.data);
    for (int64_t x = 0; x < e_n; ++x) {
      char* dst = static_cast<char*>(out->view.data) + x * rows * cols * 2;
      PG_RETURN_IF_ERROR(MatrixInto(fp + "experts." + std::to_string(x) + "." + which + ".weight", {rows, cols}, dst));
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
    PG_RETURN_IF_ERROR(Matrix(prefix + "wkv.weight", {width, hidden}, &c->wkv));
    PG_RETURN_IF_ERROR(Matrix(prefix + "wgate.weight", {width, hidden}, &c->wgate));
    PG_RETURN_IF_ERROR(F32(prefix + "ape", {ratio, width}, &c->ape));
    return F32(prefix + "norm.weight", {dim}, &c->norm);
  }

  Status Layer(const ModelConfig& c, int64_t i, DeviceLayer* l) {
    const std::string p = "layers." + std::to_string(i) + ".";
    const int64_t d = c.hidden_size;
    const int64_t hc = c.hc_mult;
    const int64_t hd = c.head_dim;
    PG_RETURN_IF_ERROR(F32(p + "attn_norm.weight", {d}, &l->attn_norm));
    PG_RETURN_IF_ERROR(F32(p + "ffn_norm.weight", {d}, &l->ffn_norm));
    PG_RETURN_IF_ERROR(Hc(p + "hc_attn_", (2 + hc) * hc, hc * d, 3, &l->hc_attn));
    PG_RETURN_IF_ERROR(Hc(p + "hc_ffn_", (2 + hc) * hc, hc * d, 3, &l->hc_ffn));

    const std::string ap = p + "attn.";
    PG_RETURN_IF_ERROR(Projection({ap + "wq_a.weight"}, c.q_lora_rank, d, &l->wq_a));
    PG_RETURN_IF_ERROR(F32(ap + "q_norm.weight", {c.q_lora_rank}, &l->q_norm));
    PG_RETURN_IF_ERROR(Projection({ap + "wq_b.weight"}, c.num_heads * hd, c.q_lora_rank, &l->wq_b));
    PG_RETURN_IF_ERROR(Projection({ap + "wkv.weight"}, hd, d, &l->wkv));
    PG_RETURN_IF_ERROR(F32(ap + "kv_norm.weight", {hd}, &l->kv_norm));
    const int64_t group_in = c.num_heads * hd / c.o_groups;
    PG_RETURN_IF_ERROR(Matrix(ap + "wo_a.weight", {c.o_groups * c.o_lora_rank, group_in}, &l->wo_a));
    l->wo_a.view = Tensor::Contiguous(l->wo_a.view.data, DType::kBF16, {c.o_groups, c.o_lora_rank, group_in},
                                      Device::kCuda);
    PG_RETURN_IF_ERROR(Projection({ap + "wo_b.weight"}, d, c.o_groups * c.o_lora_rank, &l->wo_b));
    PG_RETURN_IF_ERROR(F32(ap + "attn_sink", {c.num_heads}, &l->sink));
    const int64_t ratio = c.CompressRatio(i);
    const bool is_csa = c.layer_types[static_cast<size_t>(i)] == AttentionType::kCompressedSparse;
    if (ratio > 0) {
      l->compressor.emplace();
      PG_RETURN_IF_ERROR(Compressor(ap + "compressor.", ratio, is_csa, hd, d, &*l->compressor));
    }
    if (is_csa) {
      PG_RETURN_IF_ERROR(Projection({ap + "indexer.wq_b.weight"}, c.index_n_heads * c.index_head_dim, c.q_lora_rank,
                                    &l->index_wq_b));
      const float weight_scale = 1.0f / std::sqrt(static_cast<float>(c.index_n_heads));
      PG_RETURN_IF_ERROR(Matrix(ap + "indexer.weights_proj.weight", {c.index_n_heads, d}, &l->index_weights_proj,
                                weight_scale, /*positive=*/true));
      l->index_compressor.emplace();
      PG_RETURN_IF_ERROR(
          Compressor(ap + "indexer.compressor.", ratio, true, c.index_head_dim, d, &*l->index_compressor));
    }

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
    PG_RETURN_IF_ERROR(Experts(fp, "w1", e, inter, d, &l->experts.w1, &l->experts.w1_scale));
    PG_RETURN_IF_ERROR(Experts(fp, "w3", e, inter, d, &l->experts.w3, &l->experts.w3_scale));
    PG_RETURN_IF_ERROR(Experts(fp, "w2", e, d, inter, &l->experts.w2, &l->experts.w2_scale));
    const int64_t shared = inter * c.num_shared_experts;
    PG_RETURN_IF_ERROR(
        Projection({fp + "shared_experts.w1.weight", fp + "shared_experts.w3.weight"}, shared, d, &l->shared_w13));
    return Projection({fp + "shared_experts.w2.weight"}, d, shared, &l->shared_w2);
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

Result<DeviceWeights> LoadDeviceWeights(const ModelConfig& c, const Checkpoint& checkpoint,
                                        const WeightLoadOptions& options, CachingAllocator& allocator,
                                        cudaStream_t stream) {
  // Synthetic weights are generated on the device: the uploader's buffers stay small.
  PG_ASSIGN_OR_RETURN(std::unique_ptr<peregrine::cuda::Uploader> up,
                      peregrine::cuda::Uploader::Create(stream, options.synthetic_matrices ? size_t{1} << 20 : size_t{64} << 20));
  Loader ld(checkpoint, options, allocator, stream, *up);
  DeviceWeights w;
  PG_RETURN_IF_ERROR(ld.Matrix("embed.weight", {c.vocab_size, c.hidden_size}, &w.embed));
  PG_RETURN_IF_ERROR(ld.Matrix("head.weight", {c.vocab_size, c.hidden_size}, &w.head));
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
  return w;
}

}  // namespace peregrine::deepseek_v4::cuda
