// Private: an error's kind as one byte, so that a rank that hears of another rank's error
// (a rejected step, a failed check, a stall) throws the same type, with the same message and
// the same exit code (docs/errors.md).
#pragma once

#include <cstdint>
#include <exception>
#include <string>

namespace antdt::detail {

enum class ErrorKind : std::uint8_t {
  runtime = 0,
  usage = 1,
  file = 2,
  checkpoint = 3,
  write = 4,
  non_finite = 5,
  stall = 6,
  device = 7
};

[[nodiscard]] ErrorKind error_kind(const std::exception& e) noexcept;
// Throws the antdt error of `kind` with `what`, shared by every rank (Error::shared); `heard`:
// this rank only heard of it.
[[noreturn]] void throw_shared_error(ErrorKind kind, const std::string& what, bool heard);

}  // namespace antdt::detail
