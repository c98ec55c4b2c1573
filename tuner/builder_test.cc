// BuildSlots: the cap on concurrent builds that jobs sharing one Builder respect.
#include "tuner/builder.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace tuneforge {
namespace {

TEST(BuildSlotsTest, NeverMoreHoldersThanSlots) {
  BuildSlots slots(2);
  std::atomic<int> holders{0}, most{0}, done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        slots.Acquire();
        int now = ++holders;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        std::this_thread::yield();
        --holders;
        slots.Release();
        ++done;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(done.load(), 1200);
  EXPECT_LE(most.load(), 2);
  EXPECT_GE(most.load(), 1);
}

TEST(BuildSlotsTest, WaitersAreServedInArrivalOrder) {
  BuildSlots slots(1);
  slots.Acquire();  // held: the next two wait
  std::vector<int> order;
  std::mutex mu;
  auto waiter = [&](int id) {
    slots.Acquire();
    {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(id);
    }
    slots.Release();
  };
  std::thread first(waiter, 1);
  while (slots.tickets() < 2) std::this_thread::yield();  // first holds ticket 1
  std::thread second(waiter, 2);
  while (slots.tickets() < 3) std::this_thread::yield();
  slots.Release();
  first.join();
  second.join();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

}  // namespace
}  // namespace tuneforge
