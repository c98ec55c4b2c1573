// Tests of TuningTask parsing, validation and canonical text.
#include "compiler/task/task.h"

#include <gtest/gtest.h>

namespace tuneforge {
namespace {

TEST(TaskTest, CanonicalFormIsOrderAndDtypeInsensitive) {
  auto a = ParseTask("matmul M=512 N=256 K=128");
  auto b = ParseTask("  matmul K=128 dtype=float32   M=512 N=256 ");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->CanonicalText(), "matmul M=512 N=256 K=128 dtype=float32");
  EXPECT_EQ(a->CanonicalText(), b->CanonicalText());
  EXPECT_EQ(a->WorkloadKey(), b->WorkloadKey());
  EXPECT_DOUBLE_EQ(a->Flops(), 2.0 * 512 * 256 * 128);
}

TEST(TaskTest, JsonRoundTrip) {
  auto a = ParseTask("matmul M=7 N=33 K=1");
  ASSERT_TRUE(a.ok());
  auto b = TaskFromJson(a->ToJson());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->CanonicalText(), b->CanonicalText());
  EXPECT_EQ(a->ToJson(), R"({"op":"matmul","params":{"M":7,"N":33,"K":1},"dtype":"float32"})");
}

struct BadTask {
  const char* text;
  const char* message_part;
};

class BadTaskTest : public ::testing::TestWithParam<BadTask> {};

TEST_P(BadTaskTest, RejectedWithAClearMessage) {
  auto t = ParseTask(GetParam().text);
  ASSERT_FALSE(t.ok()) << GetParam().text;
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(t.status().message()).find(GetParam().message_part), std::string::npos)
      << t.status().message();
}

INSTANTIATE_TEST_SUITE_P(
    All, BadTaskTest,
    ::testing::Values(BadTask{"", "empty task"}, BadTask{"conv9d M=1", "unknown op 'conv9d'"},
                      BadTask{"matmul M=512 N=512", "missing parameter K"},
                      BadTask{"matmul M=512 N=512 K", "malformed task parameter 'K'"},
                      BadTask{"matmul M=512 N=512 K=abc", "not an integer"},
                      BadTask{"matmul M=0 N=512 K=512", "must be at least 1"},
                      BadTask{"matmul M=-4 N=512 K=512", "must be at least 1"},
                      BadTask{"matmul M=1000000000 N=512 K=512", "too large"},
                      BadTask{"matmul M=65536 N=65536 K=65536", "MiB of buffers"},
                      BadTask{"matmul M=1 N=1 K=1 X=3", "unknown parameter 'X'"},
                      BadTask{"matmul M=1 M=2 N=1 K=1", "given twice"},
                      BadTask{"matmul M=1 N=1 K=1 dtype=float16", "unsupported dtype"},
                      BadTask{"M=1 N=1 K=1", "must start with an op name"}));

TEST(TaskTest, BadJson) {
  EXPECT_FALSE(TaskFromJson("{").ok());
  EXPECT_FALSE(TaskFromJson(R"({"op":"matmul","params":{"M":"x"}})").ok());
}

}  // namespace
}  // namespace tuneforge
