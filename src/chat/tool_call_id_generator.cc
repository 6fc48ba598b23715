#include "chat/tool_call_id_generator.h"

namespace peregrine::chat {
namespace {

constexpr int kNumRandomChars = 24;
constexpr char kAlphabet[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
constexpr uint64_t kAlphabetSize = sizeof(kAlphabet) - 1;

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

ToolCallIdGenerator ToolCallIdGenerator::Random(uint64_t seed) { return {Kind::kRandom, seed}; }

ToolCallIdGenerator ToolCallIdGenerator::Counter() { return {Kind::kCounter, 0}; }

std::string ToolCallIdGenerator::Next() {
  std::string id = "call_";
  switch (kind_) {
    case Kind::kCounter:
      id += std::to_string(state_++);
      return id;
    case Kind::kRandom:
      for (int i = 0; i < kNumRandomChars; ++i) {
        id += kAlphabet[SplitMix64(&state_) % kAlphabetSize];
      }
      return id;
  }
  return id;
}

}  // namespace peregrine::chat
