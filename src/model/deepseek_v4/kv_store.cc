#include "model/deepseek_v4/kv_store.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"

namespace peregrine::deepseek_v4 {

namespace {

size_t Sz(int64_t v) { return static_cast<size_t>(v); }

}  // namespace

CpuKvStore::CpuKvStore(const KvGeometry& g, int32_t num_slots, int32_t num_blocks, int32_t num_snapshots)
    : g_(g), num_slots_(num_slots), num_blocks_(num_blocks), num_snapshots_(num_snapshots) {
  const int64_t layers = static_cast<int64_t>(g.layers.size());
  int64_t p_csa = 0, p_hca = 0;
  for (const KvGeometry::Layer& l : g.layers) {
    if (l.csa_index >= 0) p_csa = l.entries_per_page;
    if (l.ratio > 0 && l.csa_index < 0) p_hca = l.entries_per_page;
  }
  slot_compressor_floats_ = g.compressor_slot_floats();
  snapshot_floats_ = layers * g.window * g.head_dim + g.num_csa * g.snapshot_tail_floats();
  window_.assign(Sz(layers * num_slots * g.window * g.head_dim));
  compressor_.assign(Sz(num_slots * slot_compressor_floats_));
  csa_entries_.assign(Sz(g.num_csa * num_blocks * p_csa * g.head_dim));
  csa_keys_.assign(Sz(g.num_csa * num_blocks * p_csa * g.index_dim));
  hca_entries_.assign(Sz(g.num_hca * num_blocks * p_hca * g.head_dim));
  snapshots_.assign(Sz(num_snapshots * snapshot_floats_));
}

uint64_t CpuKvStore::bytes() const {
  return 4 * (window_.size() + compressor_.size() + csa_entries_.size() + csa_keys_.size() + hca_entries_.size() +
              snapshots_.size()) +
         (drafter_store_ != nullptr ? drafter_store_->bytes() : 0);
}

float* CpuKvStore::Window(int64_t layer, int32_t slot) {
  PG_CHECK(slot >= 0 && slot < num_slots_, "slot outside the store");
  return window_.data() + Sz((layer * num_slots_ + slot) * g_.window * g_.head_dim);
}

float* CpuKvStore::CompressorKv(int64_t layer, int32_t slot) {
  PG_CHECK(slot >= 0 && slot < num_slots_, "slot outside the store");
  return compressor_.data() + Sz(slot * slot_compressor_floats_ + g_.compressor_offset(layer));
}

float* CpuKvStore::CompressorGate(int64_t layer, int32_t slot) {
  const KvGeometry::Layer& l = g_.layers[Sz(layer)];
  return CompressorKv(layer, slot) + g_.RingFloats(l.ratio, l.coff, g_.head_dim);
}

float* CpuKvStore::IndexerKv(int64_t layer, int32_t slot) {
  PG_CHECK(slot >= 0 && slot < num_slots_, "slot outside the store");
  return compressor_.data() + Sz(slot * slot_compressor_floats_ + g_.indexer_offset(layer));
}

float* CpuKvStore::IndexerGate(int64_t layer, int32_t slot) {
  const KvGeometry::Layer& l = g_.layers[Sz(layer)];
  return IndexerKv(layer, slot) + g_.RingFloats(l.ratio, 2, g_.index_dim);
}

float* CpuKvStore::Entry(int64_t layer, std::span<const int32_t> blocks, int64_t k) {
  const KvGeometry::Layer& l = g_.layers[Sz(layer)];
  const int64_t page = k / l.entries_per_page;
  PG_CHECK(page < static_cast<int64_t>(blocks.size()), "compressed entry past the block table");
  const int32_t block = blocks[Sz(page)];
  PG_CHECK(block >= 0 && block < num_blocks_, "block id outside the store");
  Floats& pool = l.csa_index >= 0 ? csa_entries_ : hca_entries_;
  const int64_t row = (l.cache_index * num_blocks_ + block) * l.entries_per_page + k % l.entries_per_page;
  return pool.data() + Sz(row * g_.head_dim);
}

float* CpuKvStore::IndexKey(int64_t layer, std::span<const int32_t> blocks, int64_t k) {
  const KvGeometry::Layer& l = g_.layers[Sz(layer)];
  PG_CHECK(l.csa_index >= 0, "index keys of a layer without an indexer");
  const int64_t page = k / l.entries_per_page;
  PG_CHECK(page < static_cast<int64_t>(blocks.size()), "index key past the block table");
  const int32_t block = blocks[Sz(page)];
  PG_CHECK(block >= 0 && block < num_blocks_, "block id outside the store");
  const int64_t row = (l.csa_index * num_blocks_ + block) * l.entries_per_page + k % l.entries_per_page;
  return csa_keys_.data() + Sz(row * g_.index_dim);
}

std::vector<std::span<float>> CpuKvStore::SlotRegions(int32_t slot) {
  std::vector<std::span<float>> r;
  for (int64_t l = 0; l < static_cast<int64_t>(g_.layers.size()); ++l)
    r.emplace_back(Window(l, slot), Sz(g_.window * g_.head_dim));
  r.emplace_back(compressor_.data() + Sz(slot * slot_compressor_floats_), Sz(slot_compressor_floats_));
  return r;
}

std::vector<std::span<float>> CpuKvStore::BlockRegions(int32_t block) {
  std::vector<std::span<float>> r;
  for (const KvGeometry::Layer& l : g_.layers) {
    if (l.ratio <= 0) continue;
    const int64_t p = l.entries_per_page;
    Floats& pool = l.csa_index >= 0 ? csa_entries_ : hca_entries_;
    r.emplace_back(pool.data() + Sz((l.cache_index * num_blocks_ + block) * p * g_.head_dim), Sz(p * g_.head_dim));
    if (l.csa_index >= 0)
      r.emplace_back(csa_keys_.data() + Sz((l.csa_index * num_blocks_ + block) * p * g_.index_dim), Sz(p * g_.index_dim));
  }
  return r;
}

namespace {

size_t RegionBytes(const std::vector<std::span<float>>& regions) {
  size_t n = 0;
  for (const std::span<float>& r : regions) n += r.size_bytes();
  return n;
}

}  // namespace

Status CpuKvStore::ExportPages(int32_t slot, std::span<const int32_t> blocks, std::vector<std::vector<uint8_t>>* pages) {
  if (slot < 0 || slot >= num_slots_) return InvalidArgument("slot outside the store");
  for (int32_t b : blocks)
    if (b < 0 || b >= num_blocks_) return InvalidArgument("block id outside the store");
  pages->clear();
  auto pack = [&](const std::vector<std::span<float>>& regions) {
    std::vector<uint8_t>& page = pages->emplace_back(RegionBytes(regions));
    size_t at = 0;
    for (const std::span<float>& r : regions) {
      std::memcpy(page.data() + at, r.data(), r.size_bytes());
      at += r.size_bytes();
    }
  };
  pack(SlotRegions(slot));
  for (int32_t b : blocks) pack(BlockRegions(b));
  return Status::Ok();
}

Status CpuKvStore::ImportPages(int32_t slot, std::span<const int32_t> blocks,
                               std::span<const std::vector<uint8_t>> pages) {
  if (slot < 0 || slot >= num_slots_) return InvalidArgument("slot outside the store");
  if (pages.size() != blocks.size() + 1)
    return InvalidArgument("expected " + std::to_string(blocks.size() + 1) + " KV pages, got " + std::to_string(pages.size()));
  for (int32_t b : blocks)
    if (b < 0 || b >= num_blocks_) return InvalidArgument("block id outside the store");
  auto unpack = [](const std::vector<std::span<float>>& regions, const std::vector<uint8_t>& page) {
    size_t at = 0;
    for (const std::span<float>& r : regions) {
      std::memcpy(r.data(), page.data() + at, r.size_bytes());
      at += r.size_bytes();
    }
  };
  // Sizes first: a page that does not fit leaves the blocks untouched.
  if (pages[0].size() != RegionBytes(SlotRegions(slot))) return InvalidArgument("the slot page does not fit this KV layout");
  for (size_t i = 0; i < blocks.size(); ++i)
    if (pages[i + 1].size() != RegionBytes(BlockRegions(blocks[i])))
      return InvalidArgument("a block page does not fit this KV layout");
  unpack(SlotRegions(slot), pages[0]);
  for (size_t i = 0; i < blocks.size(); ++i) unpack(BlockRegions(blocks[i]), pages[i + 1]);
  if (slot < static_cast<int32_t>(staged_.size())) staged_[Sz(slot)] = StagedTree{};
  if (slot < static_cast<int32_t>(drafter_slots_.size())) drafter_slots_[Sz(slot)] = DrafterSlot{};
  return Status::Ok();
}

float* CpuKvStore::SnapshotWindow(int32_t snapshot, int64_t layer) {
  PG_CHECK(snapshot >= 0 && snapshot < num_snapshots_, "snapshot outside the store");
  return snapshots_.data() + Sz(snapshot * snapshot_floats_ + layer * g_.window * g_.head_dim);
}

float* CpuKvStore::SnapshotTail(int32_t snapshot, int64_t layer) {
  PG_CHECK(snapshot >= 0 && snapshot < num_snapshots_, "snapshot outside the store");
  const int64_t windows = static_cast<int64_t>(g_.layers.size()) * g_.window * g_.head_dim;
  return snapshots_.data() +
         Sz(snapshot * snapshot_floats_ + windows + g_.layers[Sz(layer)].csa_index * g_.snapshot_tail_floats());
}

namespace {

// The ring rows of the block that ends at `boundary` (coff 2 rings: blocks alternate halves).
int64_t EndingBlockRow(int64_t boundary, int64_t ratio) { return ((boundary / ratio - 1) & 1) * ratio; }

}  // namespace

void CpuKvStore::WriteSnapshot(int64_t layer, int32_t slot, int32_t snapshot, int64_t boundary) {
  const int64_t wd = g_.window * g_.head_dim;
  std::copy_n(Window(layer, slot), wd, SnapshotWindow(snapshot, layer));
  const KvGeometry::Layer& l = g_.layers[Sz(layer)];
  if (l.csa_index < 0) return;  // HCA rings are empty at a boundary
  float* tail = SnapshotTail(snapshot, layer);
  const int64_t row = EndingBlockRow(boundary, l.ratio);
  const int64_t cw = 2 * g_.head_dim, iw = 2 * g_.index_dim;
  tail = std::copy_n(CompressorKv(layer, slot) + row * cw, l.ratio * cw, tail);
  tail = std::copy_n(CompressorGate(layer, slot) + row * cw, l.ratio * cw, tail);
  tail = std::copy_n(IndexerKv(layer, slot) + row * iw, l.ratio * iw, tail);
  std::copy_n(IndexerGate(layer, slot) + row * iw, l.ratio * iw, tail);
}

void CpuKvStore::Restore(int32_t slot, int32_t snapshot, int64_t boundary) {
  const int64_t wd = g_.window * g_.head_dim;
  for (int64_t i = 0; i < static_cast<int64_t>(g_.layers.size()); ++i) {
    std::copy_n(SnapshotWindow(snapshot, i), wd, Window(i, slot));
    const KvGeometry::Layer& l = g_.layers[Sz(i)];
    if (l.csa_index < 0) continue;
    const float* tail = SnapshotTail(snapshot, i);
    const int64_t row = EndingBlockRow(boundary, l.ratio);
    const int64_t cw = 2 * g_.head_dim, iw = 2 * g_.index_dim;
    std::copy_n(tail, l.ratio * cw, CompressorKv(i, slot) + row * cw);
    tail += l.ratio * cw;
    std::copy_n(tail, l.ratio * cw, CompressorGate(i, slot) + row * cw);
    tail += l.ratio * cw;
    std::copy_n(tail, l.ratio * iw, IndexerKv(i, slot) + row * iw);
    tail += l.ratio * iw;
    std::copy_n(tail, l.ratio * iw, IndexerGate(i, slot) + row * iw);
  }
}

CpuKvStore::StagedTree& CpuKvStore::Staged(int32_t slot) {
  PG_CHECK(slot >= 0 && slot < num_slots_, "slot outside the store");
  if (staged_.empty()) staged_.resize(Sz(num_slots_));
  return staged_[Sz(slot)];
}

CpuKvStore& CpuKvStore::DrafterStore(const KvGeometry& geometry) {
  if (drafter_store_ == nullptr) drafter_store_ = std::make_unique<CpuKvStore>(geometry, num_slots_, 0, 0);
  return *drafter_store_;
}

CpuKvStore::DrafterSlot& CpuKvStore::Drafter(int32_t slot) {
  PG_CHECK(slot >= 0 && slot < num_slots_, "slot outside the store");
  if (drafter_slots_.empty()) drafter_slots_.resize(Sz(num_slots_));
  return drafter_slots_[Sz(slot)];
}

SequenceState SequenceState::Create(const ModelConfig& config) {
  SequenceState s;
  const KvGeometry g = KvGeometry::For(config, kDefaultBlockTokens, KvElementSizes{});
  const auto blocks = static_cast<int32_t>(g.Layout().BlocksFor(config.max_position_embeddings));
  s.kv = std::make_unique<CpuKvStore>(g, 1, blocks, 0);
  for (int32_t b = 0; b < blocks; ++b) s.blocks.push_back(b);
  return s;
}

}  // namespace peregrine::deepseek_v4
