#include "sampling/sampling_params.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

namespace peregrine {
namespace {

constexpr int64_t kVocab = 1000;
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Every bad value gets InvalidArgument with a message naming the field and never the value.
void ExpectRejected(const SamplingParams& p, const std::string& field) {
  const Status s = ValidateSamplingParams(p, kVocab);
  ASSERT_FALSE(s.ok()) << field;
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'" + field + "'"), std::string::npos) << s.message();
  for (const char* echoed : {"nan", "inf", "e+", "1e", "999"}) {
    EXPECT_EQ(s.message().find(echoed), std::string::npos) << s.message();
  }
}

void ExpectAccepted(const SamplingParams& p) {
  const Status s = ValidateSamplingParams(p, kVocab);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(ValidateSamplingParamsTest, DefaultsAreValid) { ExpectAccepted(SamplingParams{}); }

TEST(ValidateSamplingParamsTest, Temperature) {
  for (float t : {0.0f, 0.5f, 2.0f, 1e-30f}) {
    SamplingParams p;
    p.temperature = t;
    ExpectAccepted(p);
  }
  for (float t : {kNan, kInf, -kInf, -1.0f, -0.0001f, 2.0001f, 1e9f, 3.4e38f}) {
    SamplingParams p;
    p.temperature = t;
    ExpectRejected(p, "temperature");
  }
}

TEST(ValidateSamplingParamsTest, TopP) {
  for (float v : {1.0f, 0.5f, 1e-7f}) {
    SamplingParams p;
    p.top_p = v;
    ExpectAccepted(p);
  }
  for (float v : {0.0f, -0.0f, -0.5f, 1.5f, 1.0000001f, kNan, kInf, -kInf}) {
    SamplingParams p;
    p.top_p = v;
    ExpectRejected(p, "top_p");
  }
}

TEST(ValidateSamplingParamsTest, TopK) {
  for (int32_t k : {-1, 0, 1, 50, std::numeric_limits<int32_t>::max()}) {
    SamplingParams p;
    p.top_k = k;
    ExpectAccepted(p);
  }
  for (int32_t k : {-2, -5, std::numeric_limits<int32_t>::min()}) {
    SamplingParams p;
    p.top_k = k;
    ExpectRejected(p, "top_k");
  }
}

TEST(ValidateSamplingParamsTest, MinP) {
  for (float v : {0.0f, 0.05f, 1.0f}) {
    SamplingParams p;
    p.min_p = v;
    ExpectAccepted(p);
  }
  for (float v : {-0.01f, 1.01f, kNan, kInf, -kInf}) {
    SamplingParams p;
    p.min_p = v;
    ExpectRejected(p, "min_p");
  }
}

TEST(ValidateSamplingParamsTest, PresenceAndFrequencyPenalties) {
  for (float v : {-2.0f, 0.0f, 1.5f, 2.0f}) {
    SamplingParams p;
    p.presence_penalty = v;
    p.frequency_penalty = v;
    ExpectAccepted(p);
  }
  for (float v : {-2.01f, 2.01f, 1e30f, -1e30f, kNan, kInf, -kInf}) {
    SamplingParams p;
    p.presence_penalty = v;
    ExpectRejected(p, "presence_penalty");
    SamplingParams q;
    q.frequency_penalty = v;
    ExpectRejected(q, "frequency_penalty");
  }
}

TEST(ValidateSamplingParamsTest, RepetitionPenalty) {
  for (float v : {0.01f, 1.0f, 1.3f, 2.0f}) {
    SamplingParams p;
    p.repetition_penalty = v;
    ExpectAccepted(p);
  }
  for (float v : {0.0f, -1.0f, 2.01f, 1e30f, kNan, kInf, -kInf}) {
    SamplingParams p;
    p.repetition_penalty = v;
    ExpectRejected(p, "repetition_penalty");
  }
}

TEST(ValidateSamplingParamsTest, LogitBiasValuesAndKeys) {
  SamplingParams ok;
  ok.logit_bias = {{0, -100.0f}, {kVocab - 1, 100.0f}, {5, 0.0f}};
  ExpectAccepted(ok);
  for (float v : {kNan, kInf, -kInf, 100.5f, -100.01f, 1e30f}) {
    SamplingParams p;
    p.logit_bias = {{3, v}};
    ExpectRejected(p, "logit_bias");
  }
  for (int32_t key : {-1, static_cast<int32_t>(kVocab), std::numeric_limits<int32_t>::max(),
                      std::numeric_limits<int32_t>::min()}) {
    SamplingParams p;
    p.logit_bias = {{key, 1.0f}};
    ExpectRejected(p, "logit_bias");
  }
  SamplingParams repeated;
  repeated.logit_bias = {{7, 1.0f}, {3, 1.0f}, {7, -1.0f}};
  ExpectRejected(repeated, "logit_bias");
}

TEST(ValidateSamplingParamsTest, LogitBiasEntryCap) {
  SamplingParams over;
  for (size_t i = 0; i <= kMaxLogitBiasEntries; ++i) over.logit_bias.push_back({static_cast<int32_t>(i), 1.0f});
  EXPECT_FALSE(ValidateSamplingParams(over, 100000).ok());
  SamplingParams huge;
  for (int32_t i = 0; i < 100000; ++i) huge.logit_bias.push_back({i, 1.0f});
  const Status s = ValidateSamplingParams(huge, 200000);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'logit_bias'"), std::string::npos);
  SamplingParams exactly_cap;
  for (size_t i = 0; i < kMaxLogitBiasEntries; ++i) {
    exactly_cap.logit_bias.push_back({static_cast<int32_t>(i), 1.0f});
  }
  EXPECT_TRUE(ValidateSamplingParams(exactly_cap, 100000).ok());
}

TEST(ValidateSamplingParamsTest, Logprobs) {
  for (int32_t v : {-1, 0, 5, kMaxTopLogprobs}) {
    SamplingParams p;
    p.logprobs = v;
    ExpectAccepted(p);
  }
  for (int32_t v : {-2, kMaxTopLogprobs + 1, 1000000, std::numeric_limits<int32_t>::max(),
                    std::numeric_limits<int32_t>::min()}) {
    SamplingParams p;
    p.logprobs = v;
    ExpectRejected(p, "logprobs");
  }
}

TEST(ValidateSamplingParamsTest, AnySeedIsValid) {
  SamplingParams p;
  p.seed = std::numeric_limits<uint64_t>::max();
  ExpectAccepted(p);
  p.seed = 0;
  ExpectAccepted(p);
}

TEST(ValidateSamplingParamsTest, NonPositiveVocabularyIsRejected) {
  EXPECT_EQ(ValidateSamplingParams(SamplingParams{}, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateSamplingParams(SamplingParams{}, -5).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace peregrine
