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
                      BadTask{"M=1 N=1 K=1", "must start with an op name"},
                      BadTask{"qmatmul M=8 N=8 K=8", "needs a dtype (one of u8s8s32, u8s8f32, u8s8u8)"},
                      BadTask{"qmatmul M=8 N=8 K=8 dtype=float32", "unsupported dtype 'float32' for qmatmul"},
                      BadTask{"matmul M=8 N=8 K=8 dtype=u8s8u8", "unsupported dtype 'u8s8u8' for matmul"},
                      BadTask{"qmatmul M=8 N=8 K=6 dtype=u8s8s32", "K=6 must be a multiple of 4"},
                      BadTask{"qmatmul M=8 N=8 K=65536 dtype=u8s8s32", "may overflow"},
                      BadTask{"qmatmul M=8 N=8 K=8 a_zero=256 dtype=u8s8u8", "must be in 0..255"},
                      BadTask{"qmatmul M=8 N=8 K=8 per_channel=1 dtype=u8s8s32", "has no scale"},
                      BadTask{"qmatmul M=8 N=8 K=8 out_zero=3 dtype=u8s8f32", "no output zero point"},
                      BadTask{"qconv2d N=1 C=8 H=8 W=8 K=8 R=3 S=3 stride=1 pad=1", "needs a dtype"},
                      BadTask{"qconv2d N=1 C=4096 H=8 W=8 K=8 R=3 S=3 stride=1 pad=1 dtype=u8s8s32",
                              "C*R*S=36864 is above 32768"},
                      BadTask{"qconv2d N=1 C=8 H=2 W=2 K=8 R=5 S=5 stride=1 pad=1 dtype=u8s8u8", "larger than the padded"},
                      BadTask{"qconv2d N=1 C=8 H=8 W=8 K=8 R=1 S=1 stride=1 pad=0 per_channel=1 dtype=u8s8s32",
                              "qconv2d dtype=u8s8s32 has no scale"},
                      BadTask{"qconv2d N=1 C=8 H=8 W=8 K=8 R=1 S=1 stride=1 pad=0 groups=2 dtype=u8s8u8",
                              "unknown parameter 'groups'"}));

TEST(TaskTest, QuantizedMatmulKeysNameDtypeZeroPointsAndScaleKind) {
  auto a = ParseTask("qmatmul K=64 N=32 M=16 dtype=u8s8u8 a_zero=128 per_channel=1 out_zero=0 bias=0");
  ASSERT_TRUE(a.ok()) << a.status();
  // Defaults (bias 0, out_zero 0) stay out of the key; the dtype is always in it.
  EXPECT_EQ(a->CanonicalText(), "qmatmul M=16 N=32 K=64 a_zero=128 per_channel=1 dtype=u8s8u8");
  EXPECT_EQ(a->QuantizedOutput(), "u8");
  EXPECT_EQ(a->Flops(), 2.0 * 16 * 32 * 64);
  // A u8, B s8, scale per column (32 floats), C u8.
  EXPECT_EQ(a->BufferBytes(), 16 * 64 + 64 * 32 + 4 * 32 + 16 * 32);
  auto json = TaskFromJson(a->ToJson());
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(json->WorkloadKey(), a->WorkloadKey());
  // Each part of the key tells tasks apart.
  for (const char* other : {"qmatmul M=16 N=32 K=64 a_zero=127 per_channel=1 dtype=u8s8u8",
                            "qmatmul M=16 N=32 K=64 a_zero=128 dtype=u8s8u8",
                            "qmatmul M=16 N=32 K=64 a_zero=128 per_channel=1 dtype=u8s8f32",
                            "qmatmul M=16 N=32 K=64 a_zero=128 per_channel=1 out_zero=5 dtype=u8s8u8"}) {
    auto b = ParseTask(other);
    ASSERT_TRUE(b.ok()) << other << ": " << b.status();
    EXPECT_NE(b->WorkloadKey(), a->WorkloadKey()) << other;
  }
  auto s32 = ParseTask("qmatmul M=4 N=4 K=4 bias=1 dtype=u8s8s32");
  ASSERT_TRUE(s32.ok()) << s32.status();
  EXPECT_EQ(s32->BufferBytes(), 16 + 16 + 4 * 4 + 4 * 16);
  // A float task's JSON without a dtype is still float32.
  auto plain = TaskFromJson(R"({"op":"matmul","params":{"M":2,"N":2,"K":2}})");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->dtype(), "float32");
}

TEST(TaskTest, QuantizedConvolutionKeysAndSizes) {
  auto a = ParseTask("qconv2d N=1 C=64 H=14 W=14 K=32 R=3 S=3 stride=2 pad=1 a_zero=128 per_channel=1 dtype=u8s8u8");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->CanonicalText(),
            "qconv2d N=1 C=64 H=14 W=14 K=32 R=3 S=3 stride=2 pad=1 a_zero=128 per_channel=1 dtype=u8s8u8");
  EXPECT_EQ(a->QuantizedOutput(), "u8");
  EXPECT_EQ(a->ConvOutH(), 7);
  EXPECT_EQ(a->Flops(), 2.0 * 7 * 7 * 32 * 64 * 9);
  // I u8, F s8, one scale per output channel, O u8.
  EXPECT_EQ(a->BufferBytes(), 64 * 14 * 14 + 32 * 64 * 9 + 4 * 32 + 32 * 7 * 7);
  auto f32 = ParseTask("qconv2d N=1 C=64 H=14 W=14 K=32 R=3 S=3 stride=2 pad=1 a_zero=128 per_channel=1 dtype=u8s8f32");
  ASSERT_TRUE(f32.ok()) << f32.status();
  EXPECT_NE(f32->WorkloadKey(), a->WorkloadKey());
}

TEST(TaskTest, BadJson) {
  EXPECT_FALSE(TaskFromJson("{").ok());
  EXPECT_FALSE(TaskFromJson(R"({"op":"matmul","params":{"M":"x"}})").ok());
}

}  // namespace
}  // namespace tuneforge
