// Fibers (fibers.h): fibers with mmap'd stacks, a round-robin scheduler per
// thread, and one process-wide waker for sleeping threads. A switch saves
// the callee-saved registers on one stack and takes them off the other
// (x86-64 Linux: a few instructions below), or, elsewhere, is ucontext's
// swapcontext, which also saves and restores the signal mask, a system call
// at every switch: 1,024 ranks spent most of a small reshard's run in it.
#include "exec/fibers.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <new>
#include <thread>
#include <utility>
#include <vector>

// (RESHARD_FIBERS_FORCE_UCONTEXT: the ucontext switch here too, for its
// tests. Not with x32's 4-byte pointers, nor where CET shadow stacks may
// be on, whose return addresses this switch does not move: there libc's
// swapcontext, which does.)
#if defined(__x86_64__) && defined(__linux__) && !defined(__ILP32__) && !(defined(__CET__) && (__CET__ & 2)) && \
    !defined(RESHARD_FIBERS_FORCE_UCONTEXT)
#define RESHARD_FIBERS_X86_64 1
#endif

#if defined(__SANITIZE_ADDRESS__)
#define RESHARD_FIBERS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RESHARD_FIBERS_ASAN 1
#endif
#endif
#ifndef RESHARD_FIBERS_X86_64
#include <ucontext.h>
#endif
#if defined(RESHARD_FIBERS_ASAN) && !defined(RESHARD_FIBERS_X86_64)
#include <dlfcn.h>
#endif
#ifdef RESHARD_FIBERS_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#ifdef RESHARD_FIBERS_X86_64
// reshard_fiber_switch(save, next): pushes the callee-saved registers and
// the x87 and SSE control words, stores the stack pointer in *save, takes
// `next` as the stack pointer and pops the same from it, returning where
// that stack last switched away (or, on a new stack, into
// reshard_fiber_entry, which calls the function in rbx; MakeContext lays
// that frame out). The System V ABI keeps every other register the
// caller's to save.
extern "C" void reshard_fiber_switch(void** save, void* next);
extern "C" void reshard_fiber_entry();
asm(R"(
  .pushsection .text
  .globl reshard_fiber_switch
  .hidden reshard_fiber_switch
  .type reshard_fiber_switch, @function
  .p2align 4
reshard_fiber_switch:
  .cfi_startproc
  pushq %rbp
  .cfi_adjust_cfa_offset 8
  pushq %rbx
  .cfi_adjust_cfa_offset 8
  pushq %r12
  .cfi_adjust_cfa_offset 8
  pushq %r13
  .cfi_adjust_cfa_offset 8
  pushq %r14
  .cfi_adjust_cfa_offset 8
  pushq %r15
  .cfi_adjust_cfa_offset 8
  subq $16, %rsp
  .cfi_adjust_cfa_offset 16
  stmxcsr 8(%rsp)
  fnstcw (%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  fldcw (%rsp)
  ldmxcsr 8(%rsp)
  addq $16, %rsp
  .cfi_adjust_cfa_offset -16
  popq %r15
  .cfi_adjust_cfa_offset -8
  popq %r14
  .cfi_adjust_cfa_offset -8
  popq %r13
  .cfi_adjust_cfa_offset -8
  popq %r12
  .cfi_adjust_cfa_offset -8
  popq %rbx
  .cfi_adjust_cfa_offset -8
  popq %rbp
  .cfi_adjust_cfa_offset -8
  ret
  .cfi_endproc
  .size reshard_fiber_switch, .-reshard_fiber_switch

  .globl reshard_fiber_entry
  .hidden reshard_fiber_entry
  .type reshard_fiber_entry, @function
  .p2align 4
reshard_fiber_entry:
  .cfi_startproc
  .cfi_undefined rip
  callq *%rbx
  ud2
  .cfi_endproc
  .size reshard_fiber_entry, .-reshard_fiber_entry
  .popsection
)");
#endif

namespace reshard {
namespace {
// Linux 6.13's guard regions: pages that fault on any access, installed in
// a mapping without splitting it (uapi value; older headers lack it).
#ifdef MADV_GUARD_INSTALL
constexpr int kMadvGuardInstall = MADV_GUARD_INSTALL;
#else
constexpr int kMadvGuardInstall = 102;
#endif

using Clock = Fibers::Clock;

// A stack switched away from: where to resume it.
struct Context {
#ifdef RESHARD_FIBERS_X86_64
  void* sp = nullptr;
#else
  ucontext_t uc{};
#endif
};

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

// Saves the running stack in `from` and resumes `to`. Elsewhere than
// x86-64, swapcontext; under AddressSanitizer, libc's own: its interceptor
// prints a warning into every process's output (which the CLI's tests read)
// and clears the shadow of the whole stack switched to at every switch,
// where StartSwitch and FinishSwitch already tell it the stacks.
void Swap(Context& from, Context& to) {
#ifdef RESHARD_FIBERS_X86_64
  reshard_fiber_switch(&from.sp, to.sp);
#elif defined(RESHARD_FIBERS_ASAN)
  using SwapFunction = int (*)(ucontext_t*, const ucontext_t*);
  static const SwapFunction libc = [] {
    void* handle = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    void* f = handle != nullptr ? dlsym(handle, "swapcontext") : nullptr;
    return f != nullptr ? reinterpret_cast<SwapFunction>(f) : &swapcontext;
  }();
  libc(&from.uc, &to.uc);
#else
  swapcontext(&from.uc, &to.uc);
#endif
}

// `c` made to start `entry` on the `bytes` of stack at `stack` at its first
// Swap. `entry` must never return.
bool MakeContext(Context& c, std::byte* stack, size_t bytes, void (*entry)()) {
#ifdef RESHARD_FIBERS_X86_64
  // The frame reshard_fiber_switch pops, 16-byte aligned as the ABI has it
  // at reshard_fiber_entry's call: the control words (the thread's own),
  // r15 r14 r13 r12 rbx rbp (rbx: the entry; rbp 0 ends frame-pointer
  // walks), and the return address, reshard_fiber_entry.
  const uintptr_t top = (reinterpret_cast<uintptr_t>(stack) + bytes) & ~uintptr_t{15};
  auto* frame = reinterpret_cast<uint64_t*>(top - 88);
  uint16_t x87 = 0;
  uint32_t sse = 0;
  asm volatile("fnstcw %0" : "=m"(x87));
  asm volatile("stmxcsr %0" : "=m"(sse));
  frame[0] = x87;
  frame[1] = sse;
  for (int k = 2; k <= 5; ++k) frame[k] = 0;
  frame[6] = reinterpret_cast<uint64_t>(entry);
  frame[7] = 0;
  frame[8] = reinterpret_cast<uint64_t>(&reshard_fiber_entry);
  c.sp = frame;
  return true;
#else
  if (getcontext(&c.uc) != 0) return false;
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = bytes;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
  return true;
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
  Context context;
  std::byte* stack = nullptr;  // above its guard
  size_t stack_bytes = 0;
  size_t index = 0;
  const std::function<void(size_t)>* body = nullptr;
  bool done = false;
  void* fake_stack = nullptr;  // ASan's, while switched away
};

// One thread's scheduler: runs its fibers in turn; each runs until it
// waits or ends.
struct Scheduler {
  Context context;  // the thread's own stack, while a fiber runs
  std::vector<Fiber*> fibers;
  Fiber* current = nullptr;
  size_t live = 0;  // fibers not yet ended
  bool spins = false;  // before sleeping, where the threads are no more than the cores
  Clock::time_point earliest = Clock::time_point::max();  // of this round's waits
  Clock::time_point now;  // as this round began (WaitClockNow)
  const void* stack_bottom = nullptr;  // ASan's view of the thread's stack
  size_t stack_size = 0;
  void* fake_stack = nullptr;

  void Resume(Fiber& f) {
    current = &f;
    StartSwitch(&fake_stack, f.stack, f.stack_bytes);
    Swap(context, f.context);
    FinishSwitch(fake_stack, nullptr, nullptr);
    current = nullptr;
  }

  // From the running fiber back to the scheduler; returns when resumed
  // (never, where `f` is done).
  void Suspend(Fiber& f) {
    StartSwitch(f.done ? nullptr : &f.fake_stack, stack_bottom, stack_size);
    Swap(f.context, context);
    FinishSwitch(f.fake_stack, &stack_bottom, &stack_size);
  }

  // Runs the fibers in turn until all have ended, or `until` (if given)
  // holds after a turn of them all.
  void Run(const std::function<bool()>* until) {
    Waker& w = TheWaker();
    while (live > 0) {
      const uint64_t seen = w.progress.load();
      earliest = Clock::time_point::max();
      now = Clock::now();
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
  // Every fiber's guard and stack, fiber k's at k * MappedBytes(): one
  // mapping, where the kernel guards without splitting it.
  std::byte* stacks = nullptr;
  size_t stacks_bytes = 0;
  std::vector<Scheduler> schedulers;
  std::vector<std::thread> threads;
  bool driven = false;  // the first scheduler's fibers run in Drive
  // The gate: no fiber runs until every thread has started.
  std::mutex mu;
  std::condition_variable cv;
  bool open = false, abandon = false;

  ~State() {
    if (stacks != nullptr) munmap(stacks, stacks_bytes);
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

bool Fibers::GuardsTakeMappings() {
  // Probed once: a page guarded in a mapping of two.
  static const bool take = [] {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    void* m = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return true;
    const bool regions = madvise(m, page, kMadvGuardInstall) == 0;
    munmap(m, 2 * page);
    return !regions;
  }();
  return take;
}

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
    const size_t each = MappedBytes(), guard = each - kStackBytes;
    if (n > 0) {
      void* m = mmap(nullptr, n * each, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (m == MAP_FAILED)
        return Status::Unavailable(
            fmt::format("could not map the {} fiber stacks the ranks need ({} bytes)", n, n * each));
      s.stacks = static_cast<std::byte*>(m);
      s.stacks_bytes = n * each;
    }
    const bool regions = !GuardsTakeMappings();
    for (size_t k = 0; k < n; ++k) {
      Fiber& f = s.fibers[k];
      std::byte* mapping = s.stacks + k * each;
      if (regions ? madvise(mapping, guard, kMadvGuardInstall) != 0 : mprotect(mapping, guard, PROT_NONE) != 0)
        return Status::Unavailable(fmt::format(
            "could not guard fiber stack {} of {}{}", k, n,
            regions ? "" : " (each guard splits the stacks' mapping: the process may hold too many mappings)"));
      f.stack = mapping + guard;
      UnpoisonStack(f.stack, kStackBytes);
      f.stack_bytes = Fibers::kStackBytes;
      f.index = k;
      f.body = &s.body;
      if (!MakeContext(f.context, f.stack, f.stack_bytes, FiberMain))
        return Status::Unavailable("getcontext failed");
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
  if (s->now >= deadline) return std::cv_status::timeout;
  lock.unlock();
  const std::cv_status waited = PauseUntil(deadline);
  LockSpinning(lock);
  return waited;
}

[[gnu::noinline]] std::cv_status PauseUntil(Clock::time_point deadline) {
  Scheduler* s = t_scheduler;
  if (s->now >= deadline) return std::cv_status::timeout;
  s->earliest = std::min(s->earliest, deadline);
  s->Suspend(*s->current);
  // (Resumed in a later round, maybe on another thread: t_scheduler again.)
  return WaitClockNow() >= deadline ? std::cv_status::timeout : std::cv_status::no_timeout;
}

[[gnu::noinline]] Clock::time_point WaitClockNow() {
  const Scheduler* s = t_scheduler;
  return s != nullptr && s->current != nullptr ? s->now : Clock::now();
}

void LockSpinning(std::unique_lock<std::mutex>& lock) {
  constexpr int kTries = 128;
  for (int k = 0; k < kTries; ++k) {
    if (lock.try_lock()) return;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  lock.lock();
}

std::unique_lock<std::mutex> LockSpinning(std::mutex& mu) {
  std::unique_lock<std::mutex> lock(mu, std::defer_lock);
  LockSpinning(lock);
  return lock;
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
