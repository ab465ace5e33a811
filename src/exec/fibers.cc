// Fibers (fibers.h): ucontext fibers with mmap'd stacks, a round-robin
// scheduler per thread, and one process-wide waker for sleeping threads.
#include "exec/fibers.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <new>
#include <thread>
#include <utility>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define RESHARD_FIBERS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RESHARD_FIBERS_ASAN 1
#endif
#endif
#ifdef RESHARD_FIBERS_ASAN
#include <dlfcn.h>
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace reshard {
namespace {

using Clock = Fibers::Clock;

// A sleeping thread wakes when `progress` moves: every NotifyAll moves it.
struct Waker {
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<uint64_t> progress{0};
  std::atomic<int> sleepers{0};
};

Waker& TheWaker() {
  static Waker* const waker = new Waker;  // never destroyed: threads may outlive static destruction
  return *waker;
}

// Tells AddressSanitizer which stack runs next (it keeps a shadow of each);
// nothing elsewhere.
void StartSwitch(void** fake_stack, const void* bottom, size_t size) {
#ifdef RESHARD_FIBERS_ASAN
  __sanitizer_start_switch_fiber(fake_stack, bottom, size);
#else
  (void)fake_stack, (void)bottom, (void)size;
#endif
}

void FinishSwitch(void* fake_stack, const void** bottom, size_t* size) {
#ifdef RESHARD_FIBERS_ASAN
  __sanitizer_finish_switch_fiber(fake_stack, bottom, size);
#else
  (void)fake_stack, (void)bottom, (void)size;
#endif
}

// Spins while `waiting()`, yielding, for at most kSpin; false if it still
// is. (Yielding, not the CPU's pause: a thread spinning on pause held the
// core the thread asking for the next run needed, 60-252 us a 16 KiB run
// against 40-52.)
template <typename Waiting>
bool SpinWhile(Waiting waiting) {
  constexpr auto kSpin = std::chrono::microseconds(50);
  const Clock::time_point until = Clock::now() + kSpin;
  for (;;) {
    for (int k = 0; k < 64; ++k) {
      if (!waiting()) return true;
      std::this_thread::yield();
    }
    if (Clock::now() >= until) return !waiting();
  }
}

// swapcontext. Under AddressSanitizer, libc's own: its interceptor prints
// a warning into every process's output (which the CLI's tests read) and
// clears the shadow of the whole stack switched to at every switch, where
// StartSwitch and FinishSwitch already tell it the stacks.
int Swap(ucontext_t* from, const ucontext_t* to) {
#ifdef RESHARD_FIBERS_ASAN
  using SwapFunction = int (*)(ucontext_t*, const ucontext_t*);
  static const SwapFunction libc = [] {
    void* handle = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    void* f = handle != nullptr ? dlsym(handle, "swapcontext") : nullptr;
    return f != nullptr ? reinterpret_cast<SwapFunction>(f) : &swapcontext;
  }();
  return libc(from, to);
#else
  return swapcontext(from, to);
#endif
}

// A new stack's shadow cleared: the range may have been an ended fiber's,
// whose last frames never returned (AddressSanitizer only).
void UnpoisonStack(void* stack, size_t bytes) {
#ifdef RESHARD_FIBERS_ASAN
  ASAN_UNPOISON_MEMORY_REGION(stack, bytes);
#else
  (void)stack, (void)bytes;
#endif
}

struct Fiber {
  ucontext_t context{};
  std::byte* mapping = nullptr;
  size_t mapping_bytes = 0;
  std::byte* stack = nullptr;  // above the guard page
  size_t stack_bytes = 0;
  size_t index = 0;
  const std::function<void(size_t)>* body = nullptr;
  bool done = false;
  void* fake_stack = nullptr;  // ASan's, while switched away
};

// One thread's scheduler: runs its fibers in turn; each runs until it
// waits or ends.
struct Scheduler {
  ucontext_t context{};  // the thread's own stack, while a fiber runs
  std::vector<Fiber*> fibers;
  Fiber* current = nullptr;
  size_t live = 0;  // fibers not yet ended
  bool spins = false;  // before sleeping, where the threads are no more than the cores
  Clock::time_point earliest = Clock::time_point::max();  // of this round's waits
  const void* stack_bottom = nullptr;  // ASan's view of the thread's stack
  size_t stack_size = 0;
  void* fake_stack = nullptr;

  void Resume(Fiber& f) {
    current = &f;
    StartSwitch(&fake_stack, f.stack, f.stack_bytes);
    Swap(&context, &f.context);
    FinishSwitch(fake_stack, nullptr, nullptr);
    current = nullptr;
  }

  // From the running fiber back to the scheduler; returns when resumed
  // (never, where `f` is done).
  void Suspend(Fiber& f) {
    StartSwitch(f.done ? nullptr : &f.fake_stack, stack_bottom, stack_size);
    Swap(&f.context, &context);
    FinishSwitch(f.fake_stack, &stack_bottom, &stack_size);
  }

  // Runs the fibers in turn until all have ended, or `until` (if given)
  // holds after a turn of them all.
  void Run(const std::function<bool()>* until) {
    Waker& w = TheWaker();
    while (live > 0) {
      const uint64_t seen = w.progress.load();
      earliest = Clock::time_point::max();
      for (Fiber* f : fibers) {
        if (f->done) continue;
        Resume(*f);
        if (f->done) --live;
      }
      if (live == 0 || (until != nullptr && (*until)())) break;
      // Every fiber left waits. Whatever changed since `seen` may be what
      // one waits for: then run them again at once. What the other
      // threads' ranks do next is often microseconds away (a barrier's
      // last rank, the next of back-to-back runs), and a sleeping thread's
      // wakeup costs more (and may land it on a busy core): spin a while
      // first, yielding, where a core is this thread's.
      if (spins &&
          SpinWhile([&] { return w.progress.load(std::memory_order_relaxed) == seen; }))
        continue;
      std::unique_lock<std::mutex> lock(w.mu);
      ++w.sleepers;
      const auto moved = [&] { return w.progress.load() != seen; };
      if (earliest == Clock::time_point::max())
        w.cv.wait(lock, moved);
      else
        w.cv.wait_until(lock, earliest, moved);
      --w.sleepers;
    }
  }
};

thread_local Scheduler* t_scheduler = nullptr;

void FiberMain() {
  Scheduler& s = *t_scheduler;
  Fiber& f = *s.current;
  FinishSwitch(nullptr, &s.stack_bottom, &s.stack_size);
  try {
    (*f.body)(f.index);
  } catch (...) {
    std::terminate();  // as an exception leaving a thread's function
  }
  f.done = true;
  s.Suspend(f);
}

}  // namespace

struct Fibers::State {
  std::function<void(size_t)> body;
  std::vector<Fiber> fibers;
  std::vector<Scheduler> schedulers;
  std::vector<std::thread> threads;
  bool driven = false;  // the first scheduler's fibers run in Drive
  // The gate: no fiber runs until every thread has started.
  std::mutex mu;
  std::condition_variable cv;
  bool open = false, abandon = false;

  ~State() {
    for (Fiber& f : fibers)
      if (f.mapping != nullptr) munmap(f.mapping, f.mapping_bytes);
  }

  void Thread(size_t t) {
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return open; });
      if (abandon) return;
    }
    t_scheduler = &schedulers[t];
    schedulers[t].Run(nullptr);
    t_scheduler = nullptr;
  }

  void OpenAndJoin(bool abandoning) {
    {
      std::lock_guard<std::mutex> lock(mu);
      open = true;
      abandon = abandoning;
    }
    cv.notify_all();
    for (std::thread& t : threads) t.join();
    threads.clear();
  }
};

Fibers::Fibers(std::unique_ptr<State> state) : state_(std::move(state)) {}

Fibers::~Fibers() {
  if (!state_) return;
  if (state_->driven && !state_->abandon) Drive([] { return false; });  // until its fibers end
  state_->OpenAndJoin(false);
}

void Fibers::Drive(const std::function<bool()>& done) {
  if (!state_->driven || InFiber()) return;  // (misuse: see fibers.h)
  Scheduler& s = state_->schedulers[0];
  Scheduler* const outer = t_scheduler;
  t_scheduler = &s;
  s.Run(&done);
  t_scheduler = outer;
}

size_t Fibers::threads() const { return state_->schedulers.size(); }

size_t Fibers::MappedBytes() {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (kStackBytes + page - 1) / page * page + (kGuardBytes + page - 1) / page * page;
}

Result<std::unique_ptr<Fibers>> Fibers::Start(size_t n, int threads, std::function<void(size_t)> body,
                                              FirstThread first) {
  try {
    auto state = std::make_unique<State>();
    State& s = *state;
    s.body = std::move(body);
    s.driven = first == FirstThread::kCallers;
    s.fibers.resize(n);
    const size_t guard = MappedBytes() - kStackBytes;
    for (size_t k = 0; k < n; ++k) {
      Fiber& f = s.fibers[k];
      f.mapping_bytes = MappedBytes();
      void* m =
          mmap(nullptr, f.mapping_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (m == MAP_FAILED)
        return Status::Unavailable(fmt::format("could map only {} of the {} fiber stacks the ranks need", k, n));
      f.mapping = static_cast<std::byte*>(m);
      if (mprotect(f.mapping, guard, PROT_NONE) != 0)
        return Status::Unavailable(fmt::format("could not guard fiber stack {} of {}", k, n));
      f.stack = f.mapping + guard;
      UnpoisonStack(f.stack, kStackBytes);
      f.stack_bytes = Fibers::kStackBytes;
      f.index = k;
      f.body = &s.body;
      if (getcontext(&f.context) != 0) return Status::Unavailable("getcontext failed");
      f.context.uc_stack.ss_sp = f.stack;
      f.context.uc_stack.ss_size = f.stack_bytes;
      f.context.uc_link = nullptr;
      makecontext(&f.context, FiberMain, 0);
    }
    const size_t count = std::max<size_t>(1, std::min(n, static_cast<size_t>(std::max(1, threads))));
    s.schedulers.resize(count);
    const bool spins = count <= std::max(1u, std::thread::hardware_concurrency());
    for (Scheduler& scheduler : s.schedulers) scheduler.spins = spins;
    for (size_t k = 0; k < n; ++k) s.schedulers[k % count].fibers.push_back(&s.fibers[k]);
    for (Scheduler& scheduler : s.schedulers) scheduler.live = scheduler.fibers.size();
    const size_t own = s.driven ? 1 : 0;
    s.threads.reserve(count - own);
    // Made before any thread starts: nothing after can fail with threads
    // running and no owner to join them.
    auto fibers = std::unique_ptr<Fibers>(new Fibers(std::move(state)));
    try {
      for (size_t t = own; t < count; ++t) s.threads.emplace_back([&s, t] { s.Thread(t); });
    } catch (...) {  // (system_error where the system is out of threads)
      const size_t started = s.threads.size();
      s.OpenAndJoin(/*abandoning=*/true);
      return Status::Unavailable(
          fmt::format("could start only {} of the {} threads the fibers need", started, count - own));
    }
    {
      std::lock_guard<std::mutex> lock(s.mu);
      s.open = true;
    }
    s.cv.notify_all();
    return fibers;
  } catch (const std::bad_alloc&) {
    return Status::Unavailable(fmt::format("out of memory starting {} fibers", n));
  }
}

// (Not inlined into a caller, so that none keeps t_scheduler's address
// across a switch: a driven fiber may go on on another thread.)
[[gnu::noinline]] bool InFiber() { return t_scheduler != nullptr && t_scheduler->current != nullptr; }

[[gnu::noinline]] std::cv_status WaitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                                           Clock::time_point deadline) {
  Scheduler* s = t_scheduler;
  if (s == nullptr || s->current == nullptr) {
    if (deadline != Clock::time_point::max()) return cv.wait_until(lock, deadline);
    cv.wait(lock);  // (a wait_until of max overflows some libraries' clock conversions)
    return std::cv_status::no_timeout;
  }
  if (Clock::now() >= deadline) return std::cv_status::timeout;
  s->earliest = std::min(s->earliest, deadline);
  Fiber& f = *s->current;
  lock.unlock();
  s->Suspend(f);
  lock.lock();
  return Clock::now() >= deadline ? std::cv_status::timeout : std::cv_status::no_timeout;
}

void NotifyAll(std::condition_variable& cv) {
  cv.notify_all();
  Waker& w = TheWaker();
  w.progress.fetch_add(1);
  // (A thread counted among the sleepers tests `progress` under the lock
  // before it sleeps: either it sees the move or it is woken here.)
  if (w.sleepers.load() > 0) {
    { std::lock_guard<std::mutex> lock(w.mu); }
    w.cv.notify_all();
  }
}

}  // namespace reshard
