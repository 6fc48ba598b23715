// Byte-level helpers shared by the output parsers: matching markers at the start of a growing
// buffer, holding back a suffix that may still become a marker, and resumable searches.
//
// Every helper answers from the bytes it is given only, so a parser built on them reaches the
// same decision whether its input arrived in one piece or byte by byte.
#pragma once

#include <cstddef>
#include <string_view>

namespace peregrine::chat {

// How `text` relates to `literal` at its start.
enum class PrefixMatch {
  kMatch,     // text starts with literal
  kPartial,   // text is a proper prefix of literal (more bytes may complete it); includes ""
  kMismatch,  // no continuation of text can start with literal
};
PrefixMatch MatchPrefix(std::string_view text, std::string_view literal);

// Length of the longest suffix of `text` that is a proper, non-empty prefix of `marker`; 0 if
// none. That many trailing bytes may still turn into the marker, so a streaming parser holds
// them back.
size_t PartialMarkerSuffix(std::string_view text, std::string_view marker);

// Finds the first occurrence of `marker` in `text` at or after `*resume`. Returns its offset, or
// npos; on a miss `*resume` moves to the first offset where an occurrence could still begin once
// `text` grows, so repeated calls over a growing buffer cost time linear in its length.
size_t FindResumable(std::string_view text, std::string_view marker, size_t* resume);

// JSON whitespace: space, tab, line feed, carriage return.
inline bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
size_t SkipSpace(std::string_view text, size_t pos);
std::string_view TrimSpace(std::string_view text);

// Start of the run of at most `max_newlines` '\n' bytes that ends at `end` (`end` itself if
// text[end - 1] is not '\n'). Used for the blank-line separator that precedes a DSML block.
size_t BackOverNewlines(std::string_view text, size_t end, size_t max_newlines);

}  // namespace peregrine::chat
