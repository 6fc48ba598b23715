// LiteralMask: tells whether a byte of reasoning text lies inside a Markdown code literal, so a
// tool-call opener merely quoted there is not taken as the end of reasoning.
//
// Recognised literals (a deliberately small subset of CommonMark):
//  - fenced code blocks: a line of up to 3 spaces then >= 3 backticks or tildes opens a fence; a
//    line of up to 3 spaces, then the same character at least as many times, then only
//    whitespace closes it. The fence lines themselves are masked. An unclosed fence masks the
//    rest of the text.
//  - inline code spans: a backtick run opens a span that a run of the same width closes. A span
//    never crosses a line break, so a stray backtick hides at most the rest of its own line.
//
// The mask is causal: whether byte i is masked depends only on bytes [0, i], which is what lets
// the streaming reasoning parser decide without looking ahead.
#pragma once

#include <cstdint>

namespace peregrine::chat {

class LiteralMask {
 public:
  // Consumes the next byte of text.
  void Advance(char c);
  // True when the byte last passed to Advance lies inside a code literal (or is one of its
  // delimiters).
  bool is_masked() const { return masked_; }
  bool is_in_fence() const { return in_fence_; }

 private:
  enum class LinePhase : uint8_t {
    kIndent,     // only up to 3 spaces so far on this line
    kLeadRun,    // reading a run of backticks or tildes that began the line
    kFenceLine,  // the line is a fence opener or a fence-closer candidate
    kText,       // anything else
  };

  void EndLine();
  // Decides what the run that began the line is; returns true for a fence line.
  bool ResolveLeadRun();
  // Applies a finished backtick run inside ordinary text to the inline-span state.
  void ApplyTickRun();

  LinePhase phase_ = LinePhase::kIndent;
  int num_indent_ = 0;
  char run_char_ = 0;
  int run_len_ = 0;       // length of the leading run in progress
  int tick_run_ = 0;      // length of a backtick run in progress inside text
  int inline_ticks_ = 0;  // width of the open inline span, 0 if none
  bool in_fence_ = false;
  char fence_char_ = 0;
  int fence_len_ = 0;
  bool is_opener_line_ = false;       // this line opens a fence (takes effect at its end)
  bool is_closer_candidate_ = false;  // this line closes the fence if it stays whitespace-only
  char line_fence_char_ = 0;
  int line_fence_len_ = 0;
  bool masked_ = false;
};

}  // namespace peregrine::chat
