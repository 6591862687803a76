// The fuzz-target interface. Each fuzz_<target>.cpp defines run(); fuzz_driver.cpp turns it
// into a libFuzzer target (clang, ANTDT_FUZZ_LIBFUZZER) or into a replay executable that runs
// it over every file of a corpus directory (any compiler; registered with ctest).
//
// The contract every decoder meets for any input (docs/fuzzing.md): it returns a valid object
// or throws an antdt::Error subclass. run() lets such an Error escape from the decode itself;
// the driver treats it as a clean rejection. Anything else (another exception, a sanitizer
// report, an abort from fail()) is a finding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <string>

#include "antdt/error.hpp"

namespace antdt::fuzz {

// The body of one target.
void run(std::span<const std::byte> input);

// A property the contract promises does not hold: prints `what` and aborts.
[[noreturn]] void fail(const std::string& what);

inline void require(bool ok, const std::string& what) {
  if (!ok) fail(what);
}

// Runs `f` on an object a decoder accepted: nothing may throw there, not even antdt::Error.
template <class F>
void must(const char* what, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    fail(std::string(what) + " threw on a restored object: " + e.what());
  }
}

// Runs a checkpoint decoder: bad bytes must be rejected with a CheckpointError, which the
// driver then counts as a clean rejection; any other antdt::Error is a finding.
template <class F>
auto restore_checkpoint(const char* what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const CheckpointError&) {
    throw;
  } catch (const Error& e) {
    fail(std::string(what) + " rejected its bytes with an antdt::Error that is not a CheckpointError: " + e.what());
  }
}

// Byte i of the input (0 past its end), used by targets to pick parameters (world size...).
inline unsigned byte_at(std::span<const std::byte> input, std::size_t i) {
  return i < input.size() ? std::to_integer<unsigned>(input[i]) : 0U;
}

}  // namespace antdt::fuzz
