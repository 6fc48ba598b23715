#include "cli/engine_factory.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "base/log.h"
#include "cli/demo_model.h"
#include "base/progress.h"
#include "model/deepseek_v4/demo_model.h"
#include "model/deepseek_v4/model.h"
#include "model/synthetic_checkpoint.h"
#include "runtime/cpu_model_runner.h"
#include "runtime/host_ranks.h"
#ifdef PEREGRINE_WITH_CUDA
#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_status.h"
#include "distributed/ipc_all_reduce.h"
#include "distributed/nccl_communicator.h"
#include "model/deepseek_v4/cuda/cuda_model.h"
#include "runtime/cuda_model_runner.h"
#endif

namespace peregrine::cli {

namespace {

constexpr uint64_t kSyntheticSeed = 20260424;  // the demo model's seed

#ifdef PEREGRINE_WITH_CUDA
// Rank `rank` of the group on its node's GPU (o.cuda_device + its local index): NCCL joined
// through the rendezvous.
Result<std::unique_ptr<distributed::Communicator>> JoinCudaGroup(const EngineOptions& o, int rank, int* device) {
  *device = o.cuda_device + rank % o.parallel.ranks_per_node();
  PG_CUDA_RETURN_IF_ERROR(cudaSetDevice(*device));
  distributed::Rendezvous r;
  r.host = o.rendezvous_host;
  r.port = o.rendezvous_port;
  r.rank = rank;
  r.size = o.parallel.world_size();
  if (rank == 0) r.server = o.rendezvous_server;
  distributed::NcclOptions no;
  if (const char* library = std::getenv("PEREGRINE_NCCL_LIBRARY"); library != nullptr && *library != '\0')
    no.library = library;
  PG_ASSIGN_OR_RETURN(std::unique_ptr<distributed::Communicator> nccl, distributed::CreateNcclCommunicator(r, no));
  // Small sums over CUDA IPC between this node's GPUs (every rank decides alike: the flag is
  // on every rank's command line, and the setup agrees or falls back on all).
  if (!o.parallel.custom_all_reduce || o.parallel.nnodes > 1) return nccl;
  std::string why_not;
  std::unique_ptr<distributed::Communicator> comm = distributed::WithIpcAllReduce(std::move(nccl), {}, &why_not);
  if (!why_not.empty()) LogWarning("custom all-reduce off, every sum through NCCL: {}", why_not);
  return comm;
}

// The device executor of rank `rank` (0 when unsharded) on `device`, holding its shard when
// `comm` is a group.
Result<std::unique_ptr<DeviceExecutor>> MakeCudaExecutor(const EngineOptions& o, const ModelSource& source, int device,
                                                         int rank, std::unique_ptr<distributed::Communicator> comm,
                                                         bool show_progress) {
  DeviceModelRegistry registry;
  deepseek_v4::cuda::RegisterDeviceModel(registry);
  PG_ASSIGN_OR_RETURN(DeviceModelFactory factory, registry.Find(source.config.model_type));
  ExecutorOptions eo;
  eo.device = device;
  eo.num_slots = o.max_num_seqs;
  eo.max_tokens = o.max_num_batched_tokens;
  // Speculative verify: every node of a slot's chain has a logits row.
  eo.max_verify_rows = CudaModelRunner::VerifyRows(o.speculative, o.max_num_seqs);
  if (o.speculative.needs_model_drafter()) {
    eo.max_draft_steps = o.speculative.num_steps;
    eo.draft_candidates = o.speculative.candidates();
  }
  eo.max_logit_rows = std::max(o.max_num_seqs, eo.max_verify_rows) + o.max_scored_rows;
  eo.max_context = o.max_model_len > 0 ? o.max_model_len : source.config.max_position_embeddings;
  eo.block_tokens = o.block_size;
  eo.kv_tokens = o.kv_cache_tokens;
  eo.gpu_memory_utilization = o.gpu_memory_utilization;
  eo.prefix_caching = o.enable_prefix_caching;
  eo.snapshot_fraction = o.kv_snapshot_fraction;
  eo.batch_invariant = o.deterministic_inference;
  eo.kv_cache_fp8 = o.kv_cache_dtype == "fp8";
  eo.weights.synthetic = o.synthetic_weights;
  eo.weights.seed = kSyntheticSeed;
  eo.weights.expert_format = o.expert_format;
  eo.weights.dense_format = o.dense_format;
  if (comm != nullptr) eo.weights.parallel = DeviceParallel{rank, comm->size(), o.parallel.expert_parallel, comm.get()};
  if (show_progress) {
    auto progress = std::make_shared<Progress>("loading weights");
    eo.weights.on_progress = [progress](int64_t done, int64_t total, uint64_t bytes) {
      progress->Update(done, total, bytes);
    };
  }
  PG_ASSIGN_OR_RETURN(std::unique_ptr<DeviceExecutor> executor,
                      DeviceExecutor::Create(source.config, *source.checkpoint, factory, eo));
  executor->AdoptCommunicator(std::move(comm));
  return executor;
}
#endif

Result<std::unique_ptr<ModelRunner>> MakeRunner(const EngineOptions& o, ModelSource source) {
  if (o.device == "cpu") {
    std::unique_ptr<HostModel> model;
    if (o.parallel.is_distributed()) {
      // Rank 0 of the group: its shard, behind the model that replays every call on the others.
      distributed::Rendezvous r;
      r.host = o.rendezvous_host;
      r.port = o.rendezvous_port;
      r.size = o.parallel.world_size();
      r.server = o.rendezvous_server;
      PG_ASSIGN_OR_RETURN(std::unique_ptr<distributed::Communicator> comm, distributed::CreateGlooCommunicator(r));
      PG_ASSIGN_OR_RETURN(std::unique_ptr<HostModel> local, MakeHostModel(o, std::move(source), comm.get()));
      LogInfo("tensor parallel over {} ranks ({}), routed experts {}", r.size, comm->name(),
              o.parallel.expert_parallel ? "partitioned (expert parallel)" : "split by intermediate");
      model = std::make_unique<RankedHostModel>(std::move(local), std::move(comm));
    } else {
      PG_ASSIGN_OR_RETURN(model, MakeHostModel(o, std::move(source), nullptr));
    }
    CpuRunnerOptions ro;
    ro.num_slots = static_cast<int32_t>(o.max_num_seqs);
    ro.kv_tokens = o.kv_cache_tokens > 0 ? o.kv_cache_tokens : int64_t{1} << 18;
    ro.block_tokens = o.block_size;
    ro.prefix_caching = o.enable_prefix_caching;
    ro.snapshot_fraction = o.kv_snapshot_fraction;
    ro.max_context = o.max_model_len;
    ro.max_scored_rows = o.max_scored_rows;
    ro.speculative = o.speculative;
    // A config with DSpark's keys names a block drafter (loaded where the checkpoint has it).
    const char* drafter = !o.speculative.needs_model_drafter()        ? "the sequence's own tokens"
                          : model->config().has_block_drafter() ? "the block drafter"
                                                                  : "the MTP layer";
    PG_ASSIGN_OR_RETURN(std::unique_ptr<CpuModelRunner> runner, CpuModelRunner::Create(std::move(model), ro));
    if (o.speculative.enabled())
      LogInfo("speculative decoding: {} over {}, {} steps, {} tokens verified per step",
              speculative::AlgorithmName(o.speculative.algorithm), drafter, o.speculative.num_steps,
              o.speculative.max_nodes() + 1);
    LogLines(LogLevel::kInfo, DescribeKvCapacity(runner->kv_capacity(), runner->max_context()));
    return std::unique_ptr<ModelRunner>(std::move(runner));
  }
  if (o.device != "cuda") return InvalidArgument("unknown device '" + o.device + "' (cpu or cuda)");
  PG_RETURN_IF_ERROR(speculative::Validate(o.speculative));
  if (o.speculative.needs_model_drafter() && source.config.has_block_drafter() &&
      o.speculative.num_steps > source.config.dspark_block_size)
    return InvalidArgument("--speculative-num-steps " + std::to_string(o.speculative.num_steps) +
                           " exceeds the block drafter's block (" + std::to_string(source.config.dspark_block_size) +
                           " positions)");
  if (o.speculative.enabled() && (!o.device_sampling || o.parallel.is_distributed()))
    return Unimplemented("speculative decoding on the GPU needs device sampling and one GPU (no --host-sampling, "
                         "no --tp)");
#ifdef PEREGRINE_WITH_CUDA
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<distributed::Communicator> comm;
  int device = o.cuda_device;
  if (o.parallel.is_distributed()) {
    PG_RETURN_IF_ERROR(CheckParallelDevices(o));
    PG_ASSIGN_OR_RETURN(comm, JoinCudaGroup(o, /*rank=*/0, &device));
    LogInfo("tensor parallel over {} GPUs ({}), routed experts {}", comm->size(), comm->name(),
            o.parallel.expert_parallel ? "partitioned (expert parallel)" : "split by intermediate");
  }
  // Before the executor: the KV pools are sized from what is left.
  std::shared_ptr<KvStagingArena> staging;
  if (o.kv_staging_bytes > 0) {
    PG_CUDA_RETURN_IF_ERROR(cudaSetDevice(o.cuda_device));
    PG_ASSIGN_OR_RETURN(staging, KvStagingArena::Create(o.kv_staging_bytes));
    LogInfo("KV staging for CUDA IPC: {:.2f} GB of device memory", static_cast<double>(staging->bytes()) / 1e9);
  }
  PG_ASSIGN_OR_RETURN(std::unique_ptr<DeviceExecutor> executor,
                      MakeCudaExecutor(o, source, device, 0, std::move(comm), /*show_progress=*/true));
  if (!o.enforce_eager) PG_RETURN_IF_ERROR(executor->EnableGraphs(std::min<int64_t>(o.max_num_seqs, 256)));
  LogInfo("CUDA model: {:.2f} GB of weights{}, loaded in {:.1f} s",
          static_cast<double>(executor->weight_bytes()) / 1e9, executor->sharded() ? " on rank 0" : "",
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  LogLines(LogLevel::kInfo, executor->Describe());
  const bool block_drafter = source.config.has_block_drafter();
  if (o.speculative.needs_model_drafter() && !executor->has_drafter())
    return InvalidArgument(std::string("speculative decoding needs a drafter: the checkpoint has no ") +
                           (block_drafter ? "block drafter (mtp.0.main_proj.weight)" : "MTP layer"));
  auto runner = std::make_unique<CudaModelRunner>(std::move(executor), o.device_sampling, o.overlap, o.speculative);
  if (o.speculative.enabled())
    LogInfo("speculative decoding: {} ({}), {} steps, {} tokens verified per step (steps do not overlap while "
            "speculating)",
            speculative::AlgorithmName(o.speculative.algorithm),
            !o.speculative.needs_model_drafter() ? "the sequence's own tokens"
            : block_drafter                      ? "the block drafter on the GPU"
                                                 : "the MTP layer on the GPU",
            o.speculative.num_steps, o.speculative.max_nodes() + 1);
  if (staging != nullptr) runner->SetKvStaging(std::move(staging));
  return std::unique_ptr<ModelRunner>(std::move(runner));
#else
  return Unimplemented("this build has no CUDA backend (nvcc was not found when it was built)");
#endif
}

}  // namespace

Result<std::unique_ptr<HostModel>> MakeHostModel(const EngineOptions& o, ModelSource source,
                                                 distributed::Communicator* comm) {
  HostModelRegistry registry;
  deepseek_v4::RegisterHostModel(registry);
  PG_ASSIGN_OR_RETURN(HostModelFactory factory, registry.Find(source.config.model_type));
  HostModelOptions mo;
  mo.num_threads = o.threads;
  mo.comm = comm;
  mo.expert_parallel = o.parallel.expert_parallel;
  mo.kv_cache_fp8 = o.kv_cache_dtype == "fp8";
  return factory(source.config, std::move(source.checkpoint), mo);
}

Status CheckParallelDevices(const EngineOptions& o) {
  if (!o.parallel.is_distributed() || o.device == "cpu") return Status::Ok();
  if (o.device != "cuda") return InvalidArgument("unknown device '" + o.device + "' (cpu or cuda)");
#ifdef PEREGRINE_WITH_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  cudaGetLastError();
  const int needed = o.parallel.ranks_per_node();
  if (count < o.cuda_device + needed)
    return InvalidArgument("--tp " + std::to_string(o.parallel.tp_size) + " needs " + std::to_string(needed) +
                           " GPUs on this node (one per rank); it has " + std::to_string(count));
  return Status::Ok();
#else
  return InvalidArgument("--tp " + std::to_string(o.parallel.tp_size) +
                         " on --device cuda needs a GPU per rank; this build has no CUDA backend");
#endif
}

Result<ModelSource> OpenModel(const EngineOptions& o) {
  ModelSource source;
  std::filesystem::path dir = o.model_path;
  if (dir.empty() && !o.synthetic_weights) {
    // The embedded trained demo model; --synthetic-weights keeps the random-weights one.
    Result<std::filesystem::path> demo = DemoModelDir();
    if (demo.ok()) {
      dir = *demo;
    } else if (demo.status().code() != StatusCode::kNotFound) {
      return demo.status();
    }
  }
  if (dir.empty()) {
    source.config = deepseek_v4::DemoModelConfig();
  } else {
    PG_ASSIGN_OR_RETURN(source.config, LoadModelConfig(dir));
  }
  if (o.num_layers > 0 && o.num_layers < source.config.num_layers) {
    source.config.num_layers = o.num_layers;
    source.config.layer_types.resize(static_cast<size_t>(o.num_layers));
    source.config.mlp_layer_types.resize(static_cast<size_t>(o.num_layers));
  }
  PG_RETURN_IF_ERROR(ValidateModelConfig(source.config));
  if (dir.empty() || o.synthetic_weights) {
    source.checkpoint = MakeSyntheticCheckpoint(source.config, kSyntheticSeed);
  } else {
    PG_ASSIGN_OR_RETURN(source.checkpoint, Checkpoint::Open(dir));
  }
  return source;
}

Status RunCudaRank(const EngineOptions& o, int rank) {
#ifdef PEREGRINE_WITH_CUDA
  PG_ASSIGN_OR_RETURN(ModelSource source, OpenModel(o));
  int device = 0;
  PG_ASSIGN_OR_RETURN(std::unique_ptr<distributed::Communicator> comm, JoinCudaGroup(o, rank, &device));
  PG_ASSIGN_OR_RETURN(std::unique_ptr<DeviceExecutor> executor,
                      MakeCudaExecutor(o, source, device, rank, std::move(comm), /*show_progress=*/false));
  LogInfo("rank {}: {:.2f} GB of weights on GPU {}; following rank 0", rank,
          static_cast<double>(executor->weight_bytes()) / 1e9, device);
  return executor->Follow();
#else
  (void)o;
  (void)rank;
  return Unimplemented("this build has no CUDA backend");
#endif
}

Result<std::unique_ptr<Engine>> MakeEngine(const EngineOptions& o) {
  PG_ASSIGN_OR_RETURN(ModelSource source, OpenModel(o));
  PG_ASSIGN_OR_RETURN(std::unique_ptr<ModelRunner> runner, MakeRunner(o, std::move(source)));
  EngineConfig config;
  config.scheduler.max_num_batched_tokens = o.max_num_batched_tokens;
  config.scheduler.max_num_seqs = o.max_num_seqs;
  config.scheduler.max_num_waiting = o.max_num_waiting;
  config.scheduler.long_prefill_token_threshold = o.long_prefill_token_threshold;
  if (o.kv_cache_dtype == "fp8") config.kv_cache_dtype = "fp8";
  auto engine = std::make_unique<Engine>(config, std::move(runner));
  engine->Start();
  return engine;
}

}  // namespace peregrine::cli
