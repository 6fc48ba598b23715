// JobRegistry: the generation jobs whose engine requests are live, so Drain can end them with
// an error event and Stop can abort them in the engine. Thread-safe (one mutex).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace peregrine::server {

class JobRegistry {
 public:
  struct Entry {
    std::vector<std::string> engine_ids;       // to abort in the engine from any thread
    std::function<void()> abort_for_shutdown;  // posts the job's own shutdown path
  };

  uint64_t Add(Entry entry);
  void Remove(uint64_t key);
  size_t size() const;
  // Snapshot (so callbacks run without the lock).
  std::vector<Entry> Entries() const;

 private:
  mutable std::mutex mutex_;
  uint64_t next_key_ = 0;
  std::map<uint64_t, Entry> entries_;
};

}  // namespace peregrine::server
