// Ending collie's waits from a signal handler (interrupt.hpp).
#include <atomic>
#include <mutex>
#include <signal.h>

#include <collie/interrupt.hpp>

namespace collie {

namespace {

std::atomic<int> g_signal{0};
struct sigaction g_previous {};

void on_sigterm(int number, siginfo_t* info, void* context) {
  interrupt_waits(number);
  if ((g_previous.sa_flags & SA_SIGINFO) != 0) {
    if (g_previous.sa_sigaction != nullptr) g_previous.sa_sigaction(number, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(number);
  }
}

}  // namespace

void interrupt_waits(int signal_number) noexcept {
  g_signal.store(signal_number == 0 ? -1 : signal_number, std::memory_order_relaxed);
}

int waits_interrupted() noexcept {
  return g_signal.load(std::memory_order_relaxed);
}

std::string signal_name(int signal_number) {
  switch (signal_number) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGHUP:
      return "SIGHUP";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGUSR2:
      return "SIGUSR2";
    case -1:
      return "collie::interrupt_waits";
    default:
      return "signal " + std::to_string(signal_number);
  }
}

void resume_waits() noexcept {
  g_signal.store(0, std::memory_order_relaxed);
}

void chain_sigterm_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGTERM, nullptr, &current) != 0) return;
    const bool info = (current.sa_flags & SA_SIGINFO) != 0;
    if (!info && (current.sa_handler == SIG_DFL || current.sa_handler == SIG_IGN)) return;
    g_previous = current;
    struct sigaction mine = current;  // its mask and flags (SA_RESETHAND, SA_RESTART...)
    mine.sa_flags |= SA_SIGINFO;
    mine.sa_sigaction = on_sigterm;
    sigaction(SIGTERM, &mine, nullptr);
  });
}

}  // namespace collie
