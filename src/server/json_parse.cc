#include "server/json_parse.h"

#include <cstddef>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace peregrine::server {
namespace {

// Below this many members a linear scan for duplicates is cheaper than a hash index.
constexpr size_t kIndexFrom = 16;

class LinearBuilder {
 public:
  bool null() { return Put(Json(nullptr)); }
  bool boolean(bool v) { return Put(Json(v)); }
  bool number_integer(Json::number_integer_t v) { return Put(Json(v)); }
  bool number_unsigned(Json::number_unsigned_t v) { return Put(Json(v)); }
  bool number_float(Json::number_float_t v, const std::string&) { return Put(Json(v)); }
  bool string(std::string& v) { return Put(Json(std::move(v))); }
  bool binary(Json::binary_t&) { return false; }  // not produced by the text format

  bool start_object(std::size_t) {
    Json* slot = Slot(Json::object());
    if (slot == nullptr) return false;
    frames_.push_back({slot, {}});
    return true;
  }
  bool key(std::string& k) {
    Frame& f = frames_.back();
    // The vector under ordered_map (whose operator[] takes keys, not positions).
    Json::object_t::Container& members = *f.value->get_ptr<Json::object_t*>();
    size_t index = members.size();
    if (!f.index.empty()) {
      const auto [it, is_new] = f.index.try_emplace(k, index);
      index = it->second;
    } else {
      for (size_t i = 0; i < members.size(); ++i) {
        if (members[i].first == k) index = i;
      }
      if (index == members.size() && members.size() + 1 >= kIndexFrom) {
        for (size_t i = 0; i < members.size(); ++i) f.index.emplace(members[i].first, i);
        f.index.emplace(k, index);
      }
    }
    if (index == members.size()) members.emplace_back(std::move(k), Json());
    pending_ = &members[index].second;
    return true;
  }
  bool end_object() {
    frames_.pop_back();
    return true;
  }
  bool start_array(std::size_t) {
    Json* slot = Slot(Json::array());
    if (slot == nullptr) return false;
    frames_.push_back({slot, {}});
    return true;
  }
  bool end_array() {
    frames_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) {
    return false;
  }

  Json& root() { return root_; }

 private:
  struct Frame {
    Json* value;  // stays put: its parent grows only after this container is closed
    std::unordered_map<std::string, size_t> index;  // objects past kIndexFrom members
  };

  // Where the next value goes: the root, the member whose key came last, or a new array
  // element.
  Json* Slot(Json value) {
    if (frames_.empty()) {
      if (has_root_) return nullptr;
      has_root_ = true;
      root_ = std::move(value);
      return &root_;
    }
    Json& parent = *frames_.back().value;
    if (parent.is_array()) {
      Json::array_t& items = *parent.get_ptr<Json::array_t*>();
      items.push_back(std::move(value));
      return &items.back();
    }
    Json* slot = pending_;
    pending_ = nullptr;
    if (slot == nullptr) return nullptr;
    *slot = std::move(value);
    return slot;
  }
  bool Put(Json value) { return Slot(std::move(value)) != nullptr; }

  Json root_;
  bool has_root_ = false;
  Json* pending_ = nullptr;
  std::vector<Frame> frames_;
};

}  // namespace

std::optional<Json> ParseJsonLinear(std::string_view text) {
  LinearBuilder builder;
  try {
    if (!Json::sax_parse(text.begin(), text.end(), &builder)) return std::nullopt;
  } catch (...) {
    return std::nullopt;
  }
  return std::move(builder.root());
}

}  // namespace peregrine::server
