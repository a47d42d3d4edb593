#include "embedrt/fault_guard.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <mutex>

#include "errno_message.hpp"
#include "fault_registry.hpp"

namespace embedrt {
namespace {

// 1024 mappings open at once is far more than any process of ours has (one per model, one per
// checkpoint shard being converted).
struct Slot {
  std::atomic<bool> taken{false};
  std::atomic<std::uintptr_t> begin{0}, end{0};  // begin == 0: no range (yet)
  std::atomic<std::uint64_t> faults{0};
};
std::array<Slot, 1024> g_slots;

std::uintptr_t g_page_size = 4096;
struct sigaction g_previous {};
std::atomic<bool> g_installed{false};
std::mutex g_install_mutex;

void pass_on(int signal, siginfo_t* info, void* context) {
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(signal, info, context);
    return;
  }
  if ((g_previous.sa_flags & SA_SIGINFO) == 0 && g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(signal);
    return;
  }
  // No handler before ours: restore the default action. A hardware fault recurs when the
  // instruction runs again and kills the process as it always would; a sent signal is raised again.
  ::signal(SIGBUS, SIG_DFL);
  if (info->si_code <= 0) ::raise(SIGBUS);
}

void on_sigbus(int signal, siginfo_t* info, void* context) {
  const auto address = reinterpret_cast<std::uintptr_t>(info->si_addr);
  if (info->si_code > 0) {  // a fault, not a signal someone sent
    for (Slot& slot : g_slots) {
      const std::uintptr_t begin = slot.begin.load(std::memory_order_acquire);
      if (begin == 0 || address < begin || address >= slot.end.load(std::memory_order_acquire)) continue;
      // mmap is not on POSIX's list of async-signal-safe functions, but on Linux it is a bare
      // system call (no user-space lock, no allocation), which is what the list protects against.
      void* page = reinterpret_cast<void*>(address & ~(g_page_size - 1));
      if (::mmap(page, g_page_size, PROT_READ, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) != MAP_FAILED) {
        slot.faults.fetch_add(1, std::memory_order_relaxed);
        return;  // the load runs again and reads zeros; the caller reports the damage
      }
      break;
    }
  }
  pass_on(signal, info, context);
}

}  // namespace

namespace detail {

int register_mapping(const void* begin, std::size_t size) noexcept {
  for (std::size_t i = 0; i < g_slots.size(); ++i) {
    bool free = false;
    if (!g_slots[i].taken.compare_exchange_strong(free, true, std::memory_order_acq_rel)) continue;
    Slot& slot = g_slots[i];
    slot.faults.store(0, std::memory_order_relaxed);
    slot.end.store(reinterpret_cast<std::uintptr_t>(begin) + size, std::memory_order_release);
    slot.begin.store(reinterpret_cast<std::uintptr_t>(begin), std::memory_order_release);
    return static_cast<int>(i);
  }
  return kNoFaultSlot;
}

void unregister_mapping(int slot) noexcept {
  if (slot == kNoFaultSlot) return;
  Slot& s = g_slots[static_cast<std::size_t>(slot)];
  s.begin.store(0, std::memory_order_release);
  s.end.store(0, std::memory_order_release);
  s.taken.store(false, std::memory_order_release);
}

std::uint64_t mapping_faults(int slot) noexcept {
  if (slot == kNoFaultSlot) return 0;
  return g_slots[static_cast<std::size_t>(slot)].faults.load(std::memory_order_relaxed);
}

}  // namespace detail

Status install_fault_guard() noexcept {
  std::lock_guard<std::mutex> lock(g_install_mutex);
  if (g_installed.load()) return {};
  g_page_size = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  struct sigaction action {};
  action.sa_sigaction = on_sigbus;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  if (::sigaction(SIGBUS, &action, &g_previous) != 0) {
    return Error(ErrorCode::kIo, "cannot install the SIGBUS handler: " + detail::errno_message(errno));
  }
  g_installed.store(true);
  return {};
}

bool fault_guard_installed() noexcept { return g_installed.load(); }

}  // namespace embedrt
