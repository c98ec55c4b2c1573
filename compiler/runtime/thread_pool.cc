// tf_parallel_for: the fork-join primitive behind every ForKind::kParallel loop.
//
// One process-wide pool of worker threads, created lazily and kept for the life of
// the process (never destroyed, so no static-destruction order problem when a kernel
// runs during exit). A call runs [0, n) on min(n, num_threads) participants (the
// calling thread and workers) in contiguous blocks of iterations: about 4 blocks per
// participant, one iteration per block for short loops. Participant p owns the p-th
// share of the blocks and runs them first, in order; when its share is done it takes
// the blocks other participants have not started yet. Owning a share keeps each
// thread on the same part of the data from one parallel loop to the next (a model's
// steps: a layer's output rows are read by the next layer on the core that wrote
// them; ShuffleNet's run 3-16% faster on a 2-core Zen 4, minima of 40 runs, than with
// blocks dealt from one shared counter to whoever asked first). Taking the others'
// blocks at the end still balances loops whose iterations differ (a GEMM's last cache
// tile holds the shape's tail: 200 rows in tiles of 96 were 2 tiles on one thread
// and 8 rows on the other when the range was cut into equal halves). Workers and the waiting caller spin briefly before blocking, because a
// tuning run calls the same kernel back to back and wake-up latency would otherwise
// dominate small kernels.
//
// A worker takes part in a call only if it claims its place before the caller is
// done: when the caller has run every block itself (a short loop, or a worker that
// has not woken yet), it retires the places not claimed and returns without waiting
// for those workers. Waiting cost a small model a fixed ~15 us per parallel loop
// whenever the scheduler had put the worker on the caller's CPU (it could only run
// once the caller yielded): a two-layer MLP took 44 us per inference at 2 threads
// in about half the processes on a 2-core Zen 4, 0.4 us in the others and now.
//
// Concurrency: calls from different threads are serialised by `dispatch_mutex_`
// (the pool runs one parallel loop at a time). A call made from inside a parallel
// loop (a worker, or the caller while it runs its own chunk) runs serially.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <pthread.h>
#include <sched.h>
#include <system_error>
#include <thread>
#include <vector>

#include "compiler/runtime/runtime.h"

namespace tuneforge::runtime {
namespace {

using ParallelBody = void (*)(int64_t, void*);

// More threads than this are clamped: a larger request is almost certainly a bad
// target description, and each worker costs a stack.
constexpr int kMaxThreads = 256;
// How long a worker (or a waiting caller) polls before it blocks.
constexpr std::chrono::microseconds kSpinTime{100};
// Blocks of a parallel loop per participant (fewer when the loop is shorter).
constexpr int64_t kBlocksPerParticipant = 4;

// The largest (threads asked for, threads got) with got < asked since the last
// tf_take_thread_shortfall, packed as asked << 32 | got; 0 = none.
std::atomic<int64_t> g_shortfall{0};

void NoteShortfall(int64_t asked, int64_t got) {
  int64_t prev = g_shortfall.load(std::memory_order_relaxed);
  const int64_t next = asked << 32 | got;
  while ((prev >> 32) < asked &&
         !g_shortfall.compare_exchange_weak(prev, next, std::memory_order_relaxed)) {
  }
}

// True on pool workers, and on a calling thread while it is inside tf_parallel_for.
thread_local bool t_inside_parallel_for = false;

// Pins the calling thread to one CPU; false if the system refuses.
bool PinCallingThread(int cpu) {
  if (cpu < 0 || cpu >= CPU_SETSIZE) return false;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Polls `done()` for up to kSpinTime. Returns true if it became true.
// After a fifth of kSpinTime it yields between polls: Linux wakes a thread on its
// waker's CPU, so a worker and the caller it waits for can share one CPU, and a pure
// spin would keep the other off it until the spin ends (measured: `bench model` of
// the MLP at 2 threads took 0.2 ms instead of 0.6 us in about half the processes).
template <typename Pred>
bool SpinUntil(Pred done) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + kSpinTime, yield_after = start + kSpinTime / 5;
  while (true) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      CpuRelax();
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    if (now >= yield_after) std::this_thread::yield();
  }
}

// One parallel loop as its participants see it: blocks of `grain` iterations;
// participant p's share is blocks [first[p], first[p + 1]), of which the next not
// started is next[p].
struct LoopShare {
  ParallelBody fn = nullptr;
  void* closure = nullptr;
  int64_t n = 0;
  int64_t grain = 1;
  int64_t participants = 1;
  int64_t first[kMaxThreads + 1] = {};
  struct alignas(64) Counter {
    std::atomic<int64_t> value{0};
  };
  Counter next[kMaxThreads];
  // Participant p's place (p >= 1, a worker): kOpen until the worker claims it
  // (kClaimed) or the caller, done with every block, retires it (kRetired).
  static constexpr int kOpen = 0, kClaimed = 1, kRetired = 2;
  struct alignas(64) Place {
    std::atomic<int> state{kOpen};
  };
  Place place[kMaxThreads];
};

// Runs blocks of participant `owner`'s share until none is left.
inline void RunBlocksOf(LoopShare* share, int64_t owner) {
  const int64_t last = share->first[owner + 1];
  for (;;) {
    const int64_t block = share->next[owner].value.fetch_add(1, std::memory_order_relaxed);
    if (block >= last) return;
    const int64_t begin = block * share->grain, end = std::min(share->n, begin + share->grain);
    for (int64_t i = begin; i < end; ++i) share->fn(i, share->closure);
  }
}

// Participant `me`'s part of the loop: its own share, then what is left of the others'.
inline void RunShare(LoopShare* share, int64_t me) {
  for (int64_t k = 0; k < share->participants; ++k) RunBlocksOf(share, (me + k) % share->participants);
}

class ThreadPool {
 public:
  void SetPinCpus(const std::vector<int>& cpus) {
    std::lock_guard<std::mutex> dispatch_lock(dispatch_mutex_);
    pin_cpus_ = cpus;
  }

  static ThreadPool& Get() {
    // Intentionally leaked: workers outlive static destructors.
    static ThreadPool* pool = new ThreadPool();
    return *pool;
  }

  void ParallelFor(int64_t n, int num_threads, ParallelBody fn, void* closure) {
    std::lock_guard<std::mutex> dispatch_lock(dispatch_mutex_);
    const int64_t wanted = std::min<int64_t>(n, num_threads);
    const int64_t participants = 1 + EnsureWorkers(static_cast<int>(wanted) - 1);
    if (participants < wanted) NoteShortfall(wanted, participants);

    share_.fn = fn;
    share_.closure = closure;
    share_.n = n;
    share_.grain = std::max<int64_t>(1, n / (participants * kBlocksPerParticipant));
    share_.participants = participants;
    const int64_t blocks = (n + share_.grain - 1) / share_.grain;
    for (int64_t p = 0; p <= participants; ++p) share_.first[p] = blocks * p / participants;
    for (int64_t p = 0; p < participants; ++p) share_.next[p].value.store(share_.first[p], std::memory_order_relaxed);

    remaining_.store(participants - 1, std::memory_order_relaxed);
    // Last of the call's writes, with release: a worker whose claim reads kOpen sees
    // the call's share (and a late worker of an earlier call cannot claim this one
    // before it is written).
    for (int64_t c = 1; c < participants; ++c) share_.place[c].state.store(LoopShare::kOpen, std::memory_order_release);
    for (int64_t c = 1; c < participants; ++c) workers_[c - 1]->Assign();

    t_inside_parallel_for = true;
    RunShare(&share_, 0);
    t_inside_parallel_for = false;
    // Every block has been started (the caller took what was left): a worker that has
    // not claimed its place has nothing to do, and is not waited for.
    for (int64_t c = 1; c < participants; ++c) {
      int open = LoopShare::kOpen;
      if (share_.place[c].state.compare_exchange_strong(open, LoopShare::kRetired, std::memory_order_acq_rel)) {
        remaining_.fetch_sub(1, std::memory_order_acq_rel);
      }
    }

    auto all_done = [this] { return remaining_.load(std::memory_order_acquire) == 0; };
    if (!SpinUntil(all_done)) {
      std::unique_lock<std::mutex> lock(done_mutex_);
      done_cv_.wait(lock, all_done);
    }
  }

 private:
  // One worker thread with a private mailbox. Only the dispatcher writes the task,
  // and only while the worker is idle (the previous task's `remaining` decrement is
  // the worker's last access to it), so the task fields need no lock.
  class Worker {
   public:
    // `cpu` >= 0: the worker pins itself to it before its first task. `me`: its
    // participant number in every call (the caller is 0); the pool's share,
    // counter and completion signal never change, so a worker waking late reads
    // nothing the caller is writing.
    Worker(int cpu, int64_t me, LoopShare* share, std::atomic<int64_t>* remaining, std::mutex* done_mutex,
           std::condition_variable* done_cv)
        : share_(share), me_(me), remaining_(remaining), done_mutex_(done_mutex), done_cv_(done_cv), cpu_(cpu),
          thread_([this] { Loop(); }) {
      thread_.detach();
    }

    // Offers the worker its place in the call the pool's share now holds.
    void Assign() {
      {
        // The release store publishes the task; the lock orders it against a worker
        // that is about to block, so the wake-up cannot be lost.
        std::lock_guard<std::mutex> lock(mutex_);
        generation_.fetch_add(1, std::memory_order_release);
      }
      cv_.notify_one();
    }

   private:
    void Loop() {
      if (cpu_ >= 0) PinCallingThread(cpu_);  // best effort: unpinned still computes
      t_inside_parallel_for = true;
      uint64_t seen = 0;
      while (true) {
        auto has_task = [&] { return generation_.load(std::memory_order_acquire) != seen; };
        if (!SpinUntil(has_task)) {
          std::unique_lock<std::mutex> lock(mutex_);
          cv_.wait(lock, has_task);
        }
        seen = generation_.load(std::memory_order_acquire);
        int open = LoopShare::kOpen;
        if (!share_->place[me_].state.compare_exchange_strong(open, LoopShare::kClaimed,
                                                               std::memory_order_acq_rel)) {
          continue;  // the caller finished without this worker (retired its place)
        }
        RunShare(share_, me_);
        if (remaining_->fetch_sub(1, std::memory_order_acq_rel) == 1) {
          // Last one out wakes the caller if it blocked. Taking the mutex orders this
          // notify after the caller's predicate check.
          std::lock_guard<std::mutex> lock(*done_mutex_);
          done_cv_->notify_one();
        }
      }
    }

    std::mutex mutex_;
    std::condition_variable cv_;
    alignas(64) std::atomic<uint64_t> generation_{0};
    LoopShare* const share_;
    const int64_t me_;
    std::atomic<int64_t>* const remaining_;
    std::mutex* const done_mutex_;
    std::condition_variable* const done_cv_;
    const int cpu_;
    std::thread thread_;  // last: starts after every other member is constructed
  };

  // Grows the pool to `count` workers if it can and returns how many are available
  // (fewer if the system refuses more threads; the loop then uses fewer chunks).
  // REQUIRES: dispatch_mutex_ is held.
  int EnsureWorkers(int count) {
    try {
      while (static_cast<int>(workers_.size()) < count) {
        // Worker w is participant w + 1; the caller (participant 0) has pin_cpus_[0].
        const int cpu = pin_cpus_.empty()
                            ? -1
                            : pin_cpus_[(workers_.size() + 1) % pin_cpus_.size()];
        workers_.push_back(std::make_unique<Worker>(cpu, static_cast<int64_t>(workers_.size()) + 1, &share_,
                                                    &remaining_, &done_mutex_, &done_cv_));
      }
    } catch (const std::system_error&) {
      // Out of threads: carry on with the workers we have.
    }
    return std::min(count, static_cast<int>(workers_.size()));
  }

  std::mutex dispatch_mutex_;
  std::vector<std::unique_ptr<Worker>> workers_;   // GUARDED_BY(dispatch_mutex_)
  std::vector<int> pin_cpus_;                      // GUARDED_BY(dispatch_mutex_)
  LoopShare share_;  // the running call's; written by the caller before it assigns
  alignas(64) std::atomic<int64_t> remaining_{0};  // workers still running this call
  std::mutex done_mutex_;
  std::condition_variable done_cv_;
};

}  // namespace

std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

bool PinThreads(const std::vector<int>& cpus) {
  if (cpus.empty()) return true;
  ThreadPool::Get().SetPinCpus(cpus);
  return PinCallingThread(cpus[0]);
}

}  // namespace tuneforge::runtime

extern "C" void tf_parallel_for(int64_t n, int32_t num_threads, void (*fn)(int64_t, void*),
                                void* closure) {
  using tuneforge::runtime::t_inside_parallel_for;
  if (n <= 0) return;
  const int threads = std::clamp<int32_t>(num_threads, 1, tuneforge::runtime::kMaxThreads);
  if (threads < num_threads && n > threads) tuneforge::runtime::NoteShortfall(std::min<int64_t>(n, num_threads), threads);
  if (threads == 1 || n == 1 || t_inside_parallel_for) {
    for (int64_t i = 0; i < n; ++i) fn(i, closure);
    return;
  }
  tuneforge::runtime::ThreadPool::Get().ParallelFor(n, threads, fn, closure);
}

extern "C" int32_t tf_take_thread_shortfall(int32_t* got) {
  const int64_t v = tuneforge::runtime::g_shortfall.exchange(0, std::memory_order_relaxed);
  if (got) *got = static_cast<int32_t>(v & 0xffffffff);
  return static_cast<int32_t>(v >> 32);
}
