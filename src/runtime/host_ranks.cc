#include "runtime/host_ranks.h"

#include <cstring>
#include <string>

namespace peregrine {

namespace {

enum class Call : int64_t { kStop = 0, kCreatePools = 1, kForward = 2, kCommitTree = 3, kDraft = 4, kImportPages = 5 };

// A call's arguments as bytes: integers and integer arrays in order.
class Writer {
 public:
  void Int(int64_t v) { Put(&v, sizeof v); }
  template <typename T>
  void Ints(std::span<const T> v) {
    Int(static_cast<int64_t>(v.size()));
    Put(v.data(), v.size() * sizeof(T));
  }
  void Bytes(std::span<const uint8_t> v) { Ints(v); }
  std::vector<uint8_t>& data() { return data_; }

 private:
  void Put(const void* p, size_t n) {
    const size_t at = data_.size();
    data_.resize(at + n);
    if (n > 0) std::memcpy(data_.data() + at, p, n);
  }
  std::vector<uint8_t> data_;
};

// Reads what a Writer wrote; arrays come back as owned vectors (kept in `store` so views stay valid).
class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& data) : data_(data) {}
  int64_t Int() {
    int64_t v = 0;
    Get(&v, sizeof v);
    return v;
  }
  template <typename T>
  std::vector<T> Ints() {
    const int64_t n = Int();
    if (n < 0 || static_cast<size_t>(n) * sizeof(T) > data_.size() - at_) throw std::out_of_range("call arguments");
    std::vector<T> v(static_cast<size_t>(n));
    Get(v.data(), v.size() * sizeof(T));
    return v;
  }

 private:
  void Get(void* p, size_t n) {
    if (n > data_.size() - at_) throw std::out_of_range("call arguments");
    if (n > 0) std::memcpy(p, data_.data() + at_, n);
    at_ += n;
  }
  const std::vector<uint8_t>& data_;
  size_t at_ = 0;
};

void WriteChunks(Writer& w, std::span<const ChunkView> chunks) {
  w.Int(static_cast<int64_t>(chunks.size()));
  for (const ChunkView& c : chunks) {
    w.Int(c.slot);
    w.Int(c.first_position);
    w.Int(c.num_tokens);
    w.Ints(c.tokens);
    w.Int(c.feeds_last);
    w.Ints(c.blocks);
    w.Ints(c.snapshots);
    w.Int(c.restore);
    w.Int(c.needs_logits);
    w.Int(c.all_logits);
    w.Ints(c.tree_parents);
    w.Int(c.keep_hidden);
  }
}

// The chunks a WriteChunks wrote; their arrays live in `arrays`.
std::vector<ChunkView> ReadChunks(Reader& r, std::vector<std::vector<int32_t>>& arrays) {
  const int64_t n = r.Int();
  if (n < 0 || n > (1 << 20)) throw std::out_of_range("chunk count");
  arrays.clear();
  arrays.reserve(static_cast<size_t>(n) * 4);
  std::vector<ChunkView> chunks(static_cast<size_t>(n));
  for (ChunkView& c : chunks) {
    c.slot = static_cast<int32_t>(r.Int());
    c.first_position = r.Int();
    c.num_tokens = r.Int();
    c.tokens = arrays.emplace_back(r.Ints<int32_t>());
    c.feeds_last = r.Int() != 0;
    c.blocks = arrays.emplace_back(r.Ints<int32_t>());
    c.snapshots = arrays.emplace_back(r.Ints<int32_t>());
    c.restore = static_cast<int32_t>(r.Int());
    c.needs_logits = r.Int() != 0;
    c.all_logits = r.Int() != 0;
    c.tree_parents = arrays.emplace_back(r.Ints<int32_t>());
    c.keep_hidden = r.Int() != 0;
  }
  return chunks;
}

void WriteDrafts(Writer& w, std::span<const DraftInput> inputs) {
  w.Int(static_cast<int64_t>(inputs.size()));
  for (const DraftInput& d : inputs) {
    w.Int(d.slot);
    w.Int(d.first_position);
    w.Ints(d.rows);
    w.Ints(d.tokens);
    w.Int(d.num_steps);
    w.Int(d.top_k);
    w.Int(d.restart);
  }
}

std::vector<DraftInput> ReadDrafts(Reader& r, std::vector<std::vector<int32_t>>& arrays) {
  const int64_t n = r.Int();
  if (n < 0 || n > (1 << 20)) throw std::out_of_range("draft count");
  arrays.clear();
  arrays.reserve(static_cast<size_t>(n) * 2);
  std::vector<DraftInput> inputs(static_cast<size_t>(n));
  for (DraftInput& d : inputs) {
    d.slot = static_cast<int32_t>(r.Int());
    d.first_position = r.Int();
    d.rows = arrays.emplace_back(r.Ints<int32_t>());
    d.tokens = arrays.emplace_back(r.Ints<int32_t>());
    d.num_steps = static_cast<int32_t>(r.Int());
    d.top_k = static_cast<int32_t>(r.Int());
    d.restart = r.Int() != 0;
  }
  return inputs;
}

// One call over the group: its kind and size, then its bytes.
Status SendCall(distributed::Communicator& comm, Call call, std::vector<uint8_t>& args) {
  int64_t head[2] = {static_cast<int64_t>(call), static_cast<int64_t>(args.size())};
  PG_RETURN_IF_ERROR(comm.Broadcast(head, 2, DType::kI64, 0));
  if (!args.empty()) PG_RETURN_IF_ERROR(comm.Broadcast(args.data(), static_cast<int64_t>(args.size()), DType::kU8, 0));
  return Status::Ok();
}

Status ReceiveCall(distributed::Communicator& comm, Call* call, std::vector<uint8_t>* args) {
  int64_t head[2] = {0, 0};
  PG_RETURN_IF_ERROR(comm.Broadcast(head, 2, DType::kI64, 0));
  if (head[0] < 0 || head[0] > static_cast<int64_t>(Call::kImportPages) || head[1] < 0 || head[1] > (int64_t{1} << 34))
    return DataLoss("rank 0 sent a malformed call header");
  *call = static_cast<Call>(head[0]);
  args->resize(static_cast<size_t>(head[1]));
  if (!args->empty()) PG_RETURN_IF_ERROR(comm.Broadcast(args->data(), head[1], DType::kU8, 0));
  return Status::Ok();
}

}  // namespace

// The communicator and whether the group still holds (shared by the model and its pools).
struct RankedHostModel::Group {
  std::unique_ptr<distributed::Communicator> comm;
  Status failed = Status::Ok();  // the first collective failure; the group never recovers

  Status health() const { return failed; }
  void Fail(const Status& why) {
    if (failed.ok()) failed = why;
  }
  // Sends the call; a failure to send breaks the group.
  Status Send(Call call, Writer& w) {
    PG_RETURN_IF_ERROR(health());
    Status s = SendCall(*comm, call, w.data());
    if (!s.ok()) Fail(s);
    return s;
  }
  // The local part's result: a collective failure inside it breaks the group.
  Status After(Status s) {
    if (!s.ok() && (s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded)) Fail(s);
    return s;
  }
};

namespace {

// Rank 0's pools: imports are replayed on every rank; exports read rank 0's copy, which equals
// every rank's (the KV is whole on each).
class RankedKvPools final : public HostKvPools {
 public:
  RankedKvPools(std::unique_ptr<HostKvPools> local, std::shared_ptr<RankedHostModel::Group> group)
      : local_(std::move(local)), group_(std::move(group)) {}
  uint64_t bytes() const override { return local_->bytes(); }
  Status ExportPages(int32_t slot, std::span<const int32_t> blocks, std::vector<std::vector<uint8_t>>* pages) override {
    return local_->ExportPages(slot, blocks, pages);
  }
  Status ImportPages(int32_t slot, std::span<const int32_t> blocks,
                     std::span<const std::vector<uint8_t>> pages) override {
    Writer w;
    w.Int(slot);
    w.Ints(blocks);
    w.Int(static_cast<int64_t>(pages.size()));
    for (const auto& p : pages) w.Bytes(p);
    PG_RETURN_IF_ERROR(group_->Send(Call::kImportPages, w));
    return group_->After(local_->ImportPages(slot, blocks, pages));
  }
  HostKvPools& local() { return *local_; }

 private:
  std::unique_ptr<HostKvPools> local_;
  std::shared_ptr<RankedHostModel::Group> group_;
};

HostKvPools& Local(HostKvPools& kv) {
  auto* ranked = dynamic_cast<RankedKvPools*>(&kv);
  return ranked != nullptr ? ranked->local() : kv;
}

}  // namespace

RankedHostModel::RankedHostModel(std::unique_ptr<HostModel> local, std::unique_ptr<distributed::Communicator> comm)
    : local_(std::move(local)), group_(std::make_shared<Group>()) {
  group_->comm = std::move(comm);
}

RankedHostModel::~RankedHostModel() {
  if (!group_->health().ok()) return;
  Writer w;
  (void)group_->Send(Call::kStop, w);
}

std::unique_ptr<HostKvPools> RankedHostModel::CreateKvPools(int64_t block_tokens, int32_t num_slots,
                                                            int32_t num_blocks, int32_t num_snapshots) const {
  Writer w;
  w.Int(block_tokens);
  w.Int(num_slots);
  w.Int(num_blocks);
  w.Int(num_snapshots);
  // A group that fails here fails the first forward instead (the pools cannot say it).
  (void)group_->Send(Call::kCreatePools, w);
  return std::make_unique<RankedKvPools>(local_->CreateKvPools(block_tokens, num_slots, num_blocks, num_snapshots),
                                         group_);
}

Status RankedHostModel::Forward(std::span<const ChunkView> chunks, HostKvPools& kv, std::vector<float>* logits) {
  Writer w;
  WriteChunks(w, chunks);
  PG_RETURN_IF_ERROR(group_->Send(Call::kForward, w));
  return group_->After(local_->Forward(chunks, Local(kv), logits));
}

Status RankedHostModel::CommitTree(HostKvPools& kv, int32_t slot, std::span<const int32_t> blocks,
                                   std::span<const int32_t> path) {
  Writer w;
  w.Int(slot);
  w.Ints(blocks);
  w.Ints(path);
  PG_RETURN_IF_ERROR(group_->Send(Call::kCommitTree, w));
  return group_->After(local_->CommitTree(Local(kv), slot, blocks, path));
}

Status RankedHostModel::Draft(HostKvPools& kv, std::span<const DraftInput> inputs,
                              std::vector<std::vector<speculative::DepthCandidates>>* out) {
  Writer w;
  WriteDrafts(w, inputs);
  PG_RETURN_IF_ERROR(group_->Send(Call::kDraft, w));
  return group_->After(local_->Draft(Local(kv), inputs, out));
}

Status RankedHostModel::health() const { return group_->health(); }

Status RunHostRank(HostModel& local, distributed::Communicator& comm) {
  std::unique_ptr<HostKvPools> kv;
  std::vector<uint8_t> args;
  std::vector<std::vector<int32_t>> arrays;
  std::vector<float> logits;
  for (;;) {
    Call call = Call::kStop;
    PG_RETURN_IF_ERROR(ReceiveCall(comm, &call, &args));
    Status s = Status::Ok();
    try {
      Reader r(args);
      switch (call) {
        case Call::kStop:
          return Status::Ok();
        case Call::kCreatePools: {
          const int64_t block_tokens = r.Int();
          const auto slots = static_cast<int32_t>(r.Int());
          const auto blocks = static_cast<int32_t>(r.Int());
          const auto snapshots = static_cast<int32_t>(r.Int());
          kv = local.CreateKvPools(block_tokens, slots, blocks, snapshots);
          break;
        }
        case Call::kForward: {
          const std::vector<ChunkView> chunks = ReadChunks(r, arrays);
          if (kv == nullptr) return DataLoss("rank 0 ran a forward before creating the KV pools");
          s = local.Forward(chunks, *kv, &logits);
          break;
        }
        case Call::kCommitTree: {
          const int32_t slot = static_cast<int32_t>(r.Int());
          const std::vector<int32_t> blocks = r.Ints<int32_t>();
          const std::vector<int32_t> path = r.Ints<int32_t>();
          if (kv == nullptr) return DataLoss("rank 0 committed a tree before creating the KV pools");
          s = local.CommitTree(*kv, slot, blocks, path);
          break;
        }
        case Call::kDraft: {
          const std::vector<DraftInput> inputs = ReadDrafts(r, arrays);
          if (kv == nullptr) return DataLoss("rank 0 drafted before creating the KV pools");
          std::vector<std::vector<speculative::DepthCandidates>> out;
          s = local.Draft(*kv, inputs, &out);
          break;
        }
        case Call::kImportPages: {
          const int32_t slot = static_cast<int32_t>(r.Int());
          const std::vector<int32_t> blocks = r.Ints<int32_t>();
          const int64_t n = r.Int();
          if (n < 0 || n > (1 << 24)) return DataLoss("malformed page import");
          std::vector<std::vector<uint8_t>> pages;
          for (int64_t i = 0; i < n; ++i) pages.push_back(r.Ints<uint8_t>());
          if (kv == nullptr) return DataLoss("rank 0 imported pages before creating the KV pools");
          s = kv->ImportPages(slot, blocks, pages);
          break;
        }
      }
    } catch (const std::out_of_range&) {
      return DataLoss("rank 0 sent malformed call arguments");
    }
    // Rank 0 got the same error from the same inputs and carries on; a broken group does not.
    if (s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded) return s;
  }
}

}  // namespace peregrine
