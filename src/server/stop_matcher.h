// StopMatcher: finds OpenAI `stop` strings in streamed text, across any split of the text into
// pieces, and holds back only what may still become a stop string.
//
// One KMP automaton per stop string, so each byte costs O(number of stop strings) amortized,
// whatever the strings look like. The first stop string to complete (earliest end; the longest
// one on a tie) ends the text; it is cut from the output unless include_stop is set.
// Released text is valid UTF-8 when the input and the stop strings are: a held-back suffix
// always starts with the first byte of a stop string, which is a lead byte.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace peregrine::server {

class StopMatcher {
 public:
  StopMatcher(const std::vector<std::string>& stops, bool include_stop);

  // Appends to `released` what is final after `piece`. Returns true when a stop string
  // completed: the text ends there, and Feed must not be called again.
  bool Feed(std::string_view piece, std::string& released);
  // The end of the text without a stop: releases what was held back.
  void Finish(std::string& released);

  bool is_active() const { return !patterns_.empty(); }

 private:
  struct Pattern {
    std::string text;
    std::vector<int> fail;  // KMP failure function
    int state = 0;          // length of the longest prefix of text ending the input so far
  };
  std::vector<Pattern> patterns_;
  bool include_stop_;
  std::string pending_;
};

}  // namespace peregrine::server
