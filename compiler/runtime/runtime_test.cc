// Tests of the kernel runtime: the parallel-for pool, timing and module loading.
#include "compiler/runtime/runtime.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <sched.h>

namespace tuneforge::runtime {
namespace {

// Records, for every index, how often it ran and on which thread.
struct Recorder {
  explicit Recorder(int64_t n) : count(n), thread(n) {}
  std::vector<std::atomic<int>> count;
  std::vector<std::thread::id> thread;
};

void RecordIndex(int64_t i, void* closure) {
  auto* r = static_cast<Recorder*>(closure);
  r->count[i].fetch_add(1);
  r->thread[i] = std::this_thread::get_id();
}

TEST(ParallelForTest, RunsEveryIndexOnceInContiguousBlocks) {
  for (int threads : {1, 2, 3, 4, 8}) {
    for (int64_t n : {0, 1, 2, 3, 7, 8, 64, 1001}) {
      Recorder r(n);
      tf_parallel_for(n, threads, RecordIndex, &r);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(r.count[i].load(), 1) << n << " " << threads;
      if (n == 0) continue;
      // Blocks are runs of `grain` indices (the last may be shorter), each on one
      // thread (the caller or a worker, whichever took it first); at most
      // min(n, threads) threads.
      const int64_t participants = std::min<int64_t>(n, threads);
      const int64_t grain = std::max<int64_t>(1, n / (participants * 4));
      std::set<std::thread::id> seen;
      for (int64_t i = 0; i < n; ++i) {
        seen.insert(r.thread[i]);
        if (i % grain != 0) {
          EXPECT_EQ(r.thread[i], r.thread[i - 1]) << n << " " << threads << " " << i;
        }
      }
      EXPECT_LE(static_cast<int64_t>(seen.size()), participants) << n << " " << threads;
    }
  }
}

// Blocks go to whichever participant is free: while the caller is held in index 0,
// the worker runs every other index (cut into equal halves, index 1 would wait for
// index 0 and this would never finish).
struct HeldFirst {
  std::atomic<int> others{0};
  bool saw_all = false;
};

void HoldFirstIndex(int64_t i, void* closure) {
  auto* h = static_cast<HeldFirst*>(closure);
  if (i != 0) {
    h->others.fetch_add(1);
    return;
  }
  // Bounded so that a broken pool fails the test instead of hanging it.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (h->others.load() < 3 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::yield();
  }
  h->saw_all = h->others.load() == 3;
}

TEST(ParallelForTest, FreeParticipantsTakeTheRemainingBlocks) {
  HeldFirst h;
  tf_parallel_for(4, 2, HoldFirstIndex, &h);
  EXPECT_TRUE(h.saw_all);
  EXPECT_EQ(h.others.load(), 3);
}

// Each participant runs its own share of the blocks first, in order: with 4 indices
// on 2 threads the caller owns 0 and 1, the worker 2 and 3. Index 2 waits until 0 and
// 1 have run, so the worker cannot reach the caller's share before the caller has run
// it: both run on the calling thread (blocks dealt from one shared counter let the
// worker take index 1 while the caller ran index 0).
struct OwnShare {
  std::thread::id thread[4];
  std::atomic<int> done{0};
};

void RecordAndHoldTwo(int64_t i, void* closure) {
  auto* o = static_cast<OwnShare*>(closure);
  o->thread[i] = std::this_thread::get_id();
  if (i == 2) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (o->done.load() < 2 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
  }
  if (i < 2) o->done.fetch_add(1);
}

TEST(ParallelForTest, EachParticipantRunsItsOwnShareFirst) {
  for (int round = 0; round < 20; ++round) {
    OwnShare o;
    tf_parallel_for(4, 2, RecordAndHoldTwo, &o);
    EXPECT_EQ(o.thread[0], std::this_thread::get_id()) << round;
    EXPECT_EQ(o.thread[1], std::this_thread::get_id()) << round;
  }
}

TEST(ParallelForTest, NonPositiveThreadCountRunsSerially) {
  Recorder r(10);
  tf_parallel_for(10, 0, RecordIndex, &r);
  for (int64_t i = 0; i < 10; ++i) {
    EXPECT_EQ(r.count[i].load(), 1);
    EXPECT_EQ(r.thread[i], std::this_thread::get_id());
  }
}

struct NestedClosure {
  std::atomic<int> total{0};
  std::atomic<int> inner_on_other_thread{0};
};

void Inner(int64_t, void* closure) { static_cast<NestedClosure*>(closure)->total.fetch_add(1); }

void Outer(int64_t, void* closure) {
  auto* c = static_cast<NestedClosure*>(closure);
  // A nested call must run serially on this thread: the probe remembers which one.
  struct Probe {
    NestedClosure* c;
    std::thread::id owner;
  } probe{c, std::this_thread::get_id()};
  tf_parallel_for(
      16, 4,
      [](int64_t i, void* p) {
        auto* pr = static_cast<Probe*>(p);
        if (std::this_thread::get_id() != pr->owner) pr->c->inner_on_other_thread.fetch_add(1);
        Inner(i, pr->c);
      },
      &probe);
}

TEST(ParallelForTest, NestedCallsRunSerially) {
  NestedClosure c;
  tf_parallel_for(8, 4, Outer, &c);
  EXPECT_EQ(c.total.load(), 8 * 16);
  EXPECT_EQ(c.inner_on_other_thread.load(), 0);
}

void AddOne(int64_t i, void* closure) {
  static_cast<std::atomic<int64_t>*>(closure)->fetch_add(i + 1);
}

TEST(ParallelForTest, ConcurrentCallersAreSafe) {
  constexpr int kCallers = 4;
  constexpr int kRounds = 300;
  std::vector<std::thread> callers;
  std::vector<int64_t> sums(kCallers, 0);
  for (int t = 0; t < kCallers; ++t) {
    callers.emplace_back([t, &sums] {
      for (int round = 0; round < kRounds; ++round) {
        std::atomic<int64_t> sum{0};
        tf_parallel_for(100, 3, AddOne, &sum);
        sums[t] += sum.load();
      }
    });
  }
  for (auto& c : callers) c.join();
  for (int t = 0; t < kCallers; ++t) EXPECT_EQ(sums[t], kRounds * 5050);
}

TEST(ParallelForTest, ForkJoinLatency) {
  // Many back-to-back tiny loops; mostly checks nothing is lost between calls, and
  // reports the latency for whoever tunes kSpinTime.
  std::atomic<int64_t> sum{0};
  constexpr int kCalls = 20000;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kCalls; ++i) tf_parallel_for(2, 2, AddOne, &sum);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(sum.load(), int64_t{kCalls} * 3);
  std::printf("fork-join latency (2 threads): %.2f us per call\n", seconds / kCalls * 1e6);
}

// A short loop whose caller runs every block before the sleeping worker wakes
// returns without it (the worker's place is retired); the worker wakes late, into the
// next call. Every index of both loops must run exactly once.
TEST(ParallelForTest, LoopsFinishedWithoutALateWorkerRunEveryIndexOnce) {
  for (int round = 0; round < 200; ++round) {
    if (round % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));  // the worker blocks
    Recorder short_loop(2), long_loop(64);
    tf_parallel_for(2, 2, RecordIndex, &short_loop);
    tf_parallel_for(64, 2, RecordIndex, &long_loop);
    for (int64_t i = 0; i < 2; ++i) ASSERT_EQ(short_loop.count[i].load(), 1) << round << " " << i;
    for (int64_t i = 0; i < 64; ++i) ASSERT_EQ(long_loop.count[i].load(), 1) << round << " " << i;
  }
}

TEST(ParallelForTest, WorkersSurviveIdlePeriods) {
  // After the spin phase the workers block; the next call must still wake them.
  std::atomic<int64_t> sum{0};
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    tf_parallel_for(4, 4, AddOne, &sum);
  }
  EXPECT_EQ(sum.load(), 3 * 10);
}

// Which CPUs each participant of a parallel loop ran on.
struct CpuLog {
  std::mutex mu;
  std::map<std::thread::id, std::set<int>> cpus;
};

void LogCpu(int64_t, void* closure) {
  auto* log = static_cast<CpuLog*>(closure);
  // Long enough that every participant takes blocks and the scheduler could move it.
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(300);
  while (std::chrono::steady_clock::now() < until) {
  }
  std::lock_guard<std::mutex> lock(log->mu);
  log->cpus[std::this_thread::get_id()].insert(sched_getcpu());
}

// Runs a 2-thread loop after PinThreads(pin) in a fresh process (the pool is global:
// workers that already exist are not moved) and exits 0 if every participant stayed
// on the CPU `expect` gives for it (participant 0 = the caller), 1 otherwise.
void PinnedLoopExits(const std::vector<int>& pin, const std::vector<int>& expect) {
  if (!PinThreads(pin)) std::exit(2);
  CpuLog log;
  const std::thread::id caller = std::this_thread::get_id();
  tf_parallel_for(64, 2, LogCpu, &log);
  if (log.cpus.size() != 2) std::exit(3);  // both participants must have taken blocks
  for (const auto& [thread, cpus] : log.cpus) {
    const int want = thread == caller ? expect[0] : expect[1];
    if (cpus != std::set<int>{want}) std::exit(1);
  }
  std::exit(0);
}

TEST(PinThreadsTest, ParticipantsStayOnTheirCpus) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::vector<int> cpus = AllowedCpus();
  ASSERT_FALSE(cpus.empty());
  // One CPU for all: both participants on it, where the scheduler would spread them.
  EXPECT_EXIT(PinnedLoopExits({cpus.back()}, {cpus.back(), cpus.back()}),
              ::testing::ExitedWithCode(0), "");
  if (cpus.size() >= 2) {
    // Two CPUs: the caller on the first, the worker on the second, in that order.
    EXPECT_EXIT(PinnedLoopExits({cpus[1], cpus[0]}, {cpus[1], cpus[0]}),
                ::testing::ExitedWithCode(0), "");
  }
}

TEST(FillBufferTest, DeterministicAndInRange) {
  std::vector<float> a(4096), b(4096), c(4096), d(4096);
  FillBuffer(7, 0, a.data(), a.size());
  FillBuffer(7, 0, b.data(), b.size());
  FillBuffer(7, 1, c.data(), c.size());
  FillBuffer(8, 0, d.data(), d.size());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, d);
  double mean = 0;
  for (float v : a) {
    ASSERT_GE(v, -1.0f);
    ASSERT_LT(v, 1.0f);
    mean += v;
  }
  mean /= a.size();
  EXPECT_NEAR(mean, 0.0, 0.05);
  // A prefix of a longer fill equals a shorter fill: values depend only on position.
  std::vector<float> prefix(100);
  FillBuffer(7, 0, prefix.data(), prefix.size());
  EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), a.begin()));
}

TEST(FillBufferTest, KnownValues) {
  // Pins the generator: the server's reference outputs and every agent's inputs must
  // agree across machines and releases. Changing FillBuffer invalidates stored data.
  float v[4];
  FillBuffer(1, 0, v, 4);
  EXPECT_EQ(v[0], 0x1.8c501p-2f);
  EXPECT_EQ(v[1], -0x1.3a86bp-3f);
  EXPECT_EQ(v[2], -0x1.aae58p-1f);
  EXPECT_EQ(v[3], -0x1.d4ab3p-1f);
  FillBuffer(1, 2, v, 2);
  EXPECT_EQ(v[0], 0x1.9a39bcp-1f);
  EXPECT_EQ(v[1], -0x1.cbf778p-1f);
}

TEST(FillBufferTest, TypedFillsCoverTheirRangesAndNothingElse) {
  constexpr int64_t kN = 1 << 14;
  std::vector<uint8_t> u(kN);
  FillBuffer(3, 0, DefaultFill(ElementType::kUInt8), u.data(), kN);
  EXPECT_EQ(*std::min_element(u.begin(), u.end()), 0);
  EXPECT_EQ(*std::max_element(u.begin(), u.end()), 255);
  std::vector<int8_t> s(kN);
  FillBuffer(3, 1, DefaultFill(ElementType::kInt8), s.data(), kN);
  EXPECT_EQ(*std::min_element(s.begin(), s.end()), -128);
  EXPECT_EQ(*std::max_element(s.begin(), s.end()), 127);
  std::vector<int32_t> w(kN);
  FillBuffer(3, 2, FillSpec{ElementType::kInt32, -5, 7}, w.data(), kN);
  EXPECT_EQ(*std::min_element(w.begin(), w.end()), -5);
  EXPECT_EQ(*std::max_element(w.begin(), w.end()), 6);
  std::vector<float> f(kN);
  FillBuffer(3, 3, FillSpec{ElementType::kFloat32, 0.25, 0.5}, f.data(), kN);
  EXPECT_GE(*std::min_element(f.begin(), f.end()), 0.25f);
  EXPECT_LT(*std::max_element(f.begin(), f.end()), 0.5f);
  // The default float fill is the [-1, 1) fill of every float32 task.
  std::vector<float> plain(64), typed(64);
  FillBuffer(9, 4, plain.data(), 64);
  FillBuffer(9, 4, FillSpec{}, typed.data(), 64);
  EXPECT_EQ(plain, typed);
  // Pins the integer generator, as KnownValues pins the float one (the first value is
  // the top byte of the same random word as KnownValues' first float).
  uint8_t v[3];
  FillBuffer(1, 0, DefaultFill(ElementType::kUInt8), v, 3);
  EXPECT_EQ(std::vector<int>(v, v + 3), (std::vector<int>{177, 108, 21}));
}

TEST(FillBufferTest, CheckFillRefusesRangesItCannotMake) {
  EXPECT_EQ(CheckFill(DefaultFill(ElementType::kInt32)), "");
  EXPECT_EQ(CheckFill(FillSpec{ElementType::kInt32, -2147483648.0, 2147483648.0}), "");
  EXPECT_NE(CheckFill(FillSpec{ElementType::kUInt8, -1, 10}), "");
  EXPECT_NE(CheckFill(FillSpec{ElementType::kInt8, 0, 129}), "");
  EXPECT_NE(CheckFill(FillSpec{ElementType::kInt8, 0.5, 3}), "");
  EXPECT_NE(CheckFill(FillSpec{ElementType::kFloat32, 1, 1}), "");
  EXPECT_NE(CheckFill(FillSpec{ElementType::kFloat32, 0, std::numeric_limits<double>::infinity()}), "");
  EXPECT_NE(CheckFill(FillSpec{static_cast<ElementType>(7), 0, 1}), "");
}

TEST(FirstMismatchTest, IntegerBuffersCompareExactly) {
  std::vector<int32_t> expected = {1, -2, 1 << 30, 7};
  std::vector<int32_t> actual = expected;
  EXPECT_EQ(FirstMismatch(ElementType::kInt32, actual.data(), expected.data(), 4, 0, 0), -1);
  actual[2] += 1;  // 2^30 + 1: a difference float32 could not see
  EXPECT_EQ(FirstMismatch(ElementType::kInt32, actual.data(), expected.data(), 4, 0, 0), 2);
  std::vector<uint8_t> want = {0, 255, 128}, got = {0, 255, 127};
  EXPECT_EQ(FirstMismatch(ElementType::kUInt8, got.data(), want.data(), 3, 0, 0), 2);
  EXPECT_EQ(FirstMismatch(ElementType::kUInt8, got.data(), want.data(), 3, 1, 0), -1);
  std::vector<uint8_t> poisoned(3);
  PoisonBuffer(ElementType::kUInt8, poisoned.data(), 3);
  EXPECT_EQ(FirstMismatch(ElementType::kUInt8, poisoned.data(), want.data(), 3, 0, 0), 0);
}

TEST(FirstMismatchTest, ToleranceNanAndInfinity) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> expected = {1.0f, 2.0f, -3.0f, inf};
  std::vector<float> actual = expected;
  EXPECT_EQ(FirstMismatch(actual.data(), expected.data(), 4, 0, 0), -1);
  actual[1] = 2.001f;
  EXPECT_EQ(FirstMismatch(actual.data(), expected.data(), 4, 0, 0), 1);
  EXPECT_EQ(FirstMismatch(actual.data(), expected.data(), 4, 1e-2, 0), -1);
  EXPECT_EQ(FirstMismatch(actual.data(), expected.data(), 4, 0, 1e-3), -1);
  EXPECT_EQ(FirstMismatch(actual.data(), expected.data(), 4, 0, 1e-4), 1);
  actual[1] = 2.0f;
  actual[2] = nan;
  EXPECT_EQ(FirstMismatch(actual.data(), expected.data(), 4, 1e9, 1e9), 2);
  actual[2] = -3.0f;
  actual[3] = -inf;
  EXPECT_EQ(FirstMismatch(actual.data(), expected.data(), 4, 1e-3, 1e-3), 3);
  EXPECT_EQ(FirstMismatch(actual.data(), expected.data(), 0, 0, 0), -1);
}

}  // namespace
}  // namespace tuneforge::runtime
