#include "server/stop_matcher.h"

#include <algorithm>

namespace peregrine::server {

StopMatcher::StopMatcher(const std::vector<std::string>& stops, bool include_stop)
    : include_stop_(include_stop) {
  for (const std::string& s : stops) {
    if (s.empty()) continue;
    Pattern p{s, std::vector<int>(s.size(), 0), 0};
    for (size_t i = 1, k = 0; i < s.size(); ++i) {
      while (k > 0 && s[i] != s[k]) k = static_cast<size_t>(p.fail[k - 1]);
      if (s[i] == s[k]) ++k;
      p.fail[i] = static_cast<int>(k);
    }
    patterns_.push_back(std::move(p));
  }
}

bool StopMatcher::Feed(std::string_view piece, std::string& released) {
  if (patterns_.empty()) {
    released.append(piece);
    return false;
  }
  const size_t base = pending_.size();
  pending_.append(piece);
  for (size_t i = base; i < pending_.size(); ++i) {
    const char c = pending_[i];
    const Pattern* matched = nullptr;
    for (Pattern& p : patterns_) {
      int k = p.state;
      while (k > 0 && p.text[static_cast<size_t>(k)] != c) k = p.fail[static_cast<size_t>(k - 1)];
      if (p.text[static_cast<size_t>(k)] == c) ++k;
      p.state = k;
      if (static_cast<size_t>(k) == p.text.size() &&
          (matched == nullptr || p.text.size() > matched->text.size())) {
        matched = &p;
      }
    }
    if (matched != nullptr) {
      const size_t start = i + 1 - matched->text.size();
      released.append(pending_, 0, include_stop_ ? i + 1 : start);
      pending_.clear();
      return true;
    }
  }
  int hold = 0;
  for (const Pattern& p : patterns_) hold = std::max(hold, p.state);
  const size_t keep = std::min(pending_.size(), static_cast<size_t>(hold));
  released.append(pending_, 0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return false;
}

void StopMatcher::Finish(std::string& released) {
  released += pending_;
  pending_.clear();
}

}  // namespace peregrine::server
