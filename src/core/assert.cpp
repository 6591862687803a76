#include <cstdio>
#include <cstdlib>

#include "antdt/error.hpp"

namespace antdt::detail {

void assertion_failed(const char* cond, const char* msg, const char* file, int line) noexcept {
  std::fprintf(stderr, "antdt: invariant broken: %s (%s) at %s:%d\n", msg, cond, file, line);
  std::fflush(stderr);
  std::abort();
}

}  // namespace antdt::detail
