#include "core/wait_policy.hpp"

#include <cstdlib>

#ifdef __linux__
#include <fcntl.h>
#include <unistd.h>
#endif

namespace antdt::detail {

bool PollOrNap::nap(double now, double run_delay, bool capped) noexcept {
  const double waited = now - start_;
  if (capped || waited >= spin_ || contended(now)) return true;
  if (run_delay - delay_at_start_ > kHeldShare * waited + kHeldSlack) {
    contended_until_ = now + kContendedHold;
    ++contentions_;
    return true;
  }
  return false;
}

double thread_run_delay_seconds() {
#ifdef __linux__
  // Fields: time on the CPU, time waiting to run, timeslices (nanoseconds, nanoseconds, count).
  struct File {
    int fd = ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    ~File() {
      if (fd >= 0) ::close(fd);
    }
  };
  thread_local File file;
  if (file.fd < 0) return 0.0;
  char text[96];
  const ssize_t n = ::pread(file.fd, text, sizeof text - 1, 0);
  if (n <= 0) return 0.0;
  text[n] = '\0';
  const char* p = text;
  while (*p != '\0' && *p != ' ') ++p;  // past the first field
  char* end = nullptr;
  const unsigned long long ns = std::strtoull(p, &end, 10);
  return end == p ? 0.0 : static_cast<double>(ns) * 1e-9;
#else
  return 0.0;
#endif
}

}  // namespace antdt::detail
