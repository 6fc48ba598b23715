#include "chat/reasoning_literal_mask.h"

#include "chat/marker_scan.h"

namespace peregrine::chat {

void LiteralMask::Advance(char c) {
  if (c == '\n') {
    EndLine();
    masked_ = in_fence_;
    return;
  }
  if (phase_ == LinePhase::kIndent) {
    if (c == ' ' && num_indent_ < 3) {
      ++num_indent_;
      masked_ = in_fence_;
      return;
    }
    if (c == '`' || c == '~') {
      phase_ = LinePhase::kLeadRun;
      run_char_ = c;
      run_len_ = 1;
      masked_ = true;
      return;
    }
    phase_ = LinePhase::kText;
  } else if (phase_ == LinePhase::kLeadRun) {
    if (c == run_char_) {
      ++run_len_;
      masked_ = true;
      return;
    }
    phase_ = ResolveLeadRun() ? LinePhase::kFenceLine : LinePhase::kText;
  }

  if (phase_ == LinePhase::kFenceLine) {
    if (!IsSpace(c)) is_closer_candidate_ = false;
    masked_ = true;
    return;
  }
  // Ordinary text.
  if (in_fence_) {
    masked_ = true;
    return;
  }
  if (c == '`') {
    ++tick_run_;
    masked_ = true;
    return;
  }
  ApplyTickRun();
  masked_ = inline_ticks_ > 0;
}

bool LiteralMask::ResolveLeadRun() {
  if (run_len_ >= 3) {
    if (!in_fence_) {
      is_opener_line_ = true;
      line_fence_char_ = run_char_;
      line_fence_len_ = run_len_;
      return true;
    }
    if (run_char_ == fence_char_ && run_len_ >= fence_len_) {
      is_closer_candidate_ = true;
      return true;
    }
    return false;  // a shorter or different run inside a fence is fence content
  }
  // One or two backticks at the start of a line open or close an inline span.
  if (run_char_ == '`' && !in_fence_) tick_run_ = run_len_;
  return false;
}

void LiteralMask::ApplyTickRun() {
  if (tick_run_ == 0) return;
  if (inline_ticks_ == 0) {
    inline_ticks_ = tick_run_;
  } else if (inline_ticks_ == tick_run_) {
    inline_ticks_ = 0;
  }
  tick_run_ = 0;
}

void LiteralMask::EndLine() {
  if (phase_ == LinePhase::kLeadRun) ResolveLeadRun();
  if (is_opener_line_) {
    in_fence_ = true;
    fence_char_ = line_fence_char_;
    fence_len_ = line_fence_len_;
  } else if (is_closer_candidate_) {
    in_fence_ = false;
  }
  phase_ = LinePhase::kIndent;
  num_indent_ = 0;
  run_char_ = 0;
  run_len_ = 0;
  tick_run_ = 0;
  inline_ticks_ = 0;
  is_opener_line_ = false;
  is_closer_candidate_ = false;
}

}  // namespace peregrine::chat
