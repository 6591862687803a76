#include "job/stop_signals.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "antdt/error.hpp"
#include "core/option_names.hpp"

namespace antdt::detail {

namespace {

volatile std::sig_atomic_t g_signal = 0;

extern "C" void on_stop_signal(int signal) {
  if (g_signal == 0) g_signal = signal;
}

const std::pair<const char*, int> kNames[] = {{"TERM", SIGTERM}, {"INT", SIGINT},   {"USR1", SIGUSR1},
                                              {"USR2", SIGUSR2}, {"HUP", SIGHUP},   {"QUIT", SIGQUIT},
                                              {"XCPU", SIGXCPU}, {"ALRM", SIGALRM}, {"URG", SIGURG}};

}  // namespace

std::vector<int> parse_stop_signals(const std::string& spec) {
  std::vector<int> out;
  if (spec == "none") return out;
  std::size_t start = 0;
  while (start <= spec.size()) {
    const std::size_t comma = spec.find(',', start);
    std::string name = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? spec.size() + 1 : comma + 1;
    if (name.rfind("SIG", 0) == 0) name = name.substr(3);
    int found = 0;
    for (const auto& [n, s] : kNames)
      if (name == n) found = s;
    if (found == 0) {
      throw UsageError(option_name("stop-signals") + " '" + spec + "': '" + name +
                       "' is not one of TERM, INT, USR1, USR2, HUP, QUIT, XCPU, ALRM, URG (or give none)");
    }
    out.push_back(found);
  }
  return out;
}

StopSignals::StopSignals(const std::vector<int>& signals) {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  // Restart interrupted reads and writes (HDF5, MPI's sockets); the second signal is the default.
  action.sa_flags = SA_RESTART | SA_RESETHAND;
  for (int s : signals) {
    struct sigaction old {};
    if (sigaction(s, &action, &old) != 0) throw Error("cannot handle " + signal_name(s) + ": " + std::strerror(errno));
    previous_.emplace_back(s, old);
  }
  parent_ = static_cast<int>(getppid());
}

StopSignals::~StopSignals() {
  for (auto& [s, old] : previous_) (void)sigaction(s, &old, nullptr);
}

bool StopSignals::launcher_gone() const noexcept { return parent_ > 1 && static_cast<int>(getppid()) != parent_; }

int stop_signal() noexcept { return g_signal; }

std::string signal_name(int signal) {
  for (const auto& [n, s] : kNames)
    if (s == signal) return std::string("SIG") + n;
  return "signal " + std::to_string(signal);
}

}  // namespace antdt::detail
