// Entry points around antdt::fuzz::run: libFuzzer's, or a replay main for ctest.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "antdt/error.hpp"
#include "fuzz_target.hpp"

namespace antdt::fuzz {

void fail(const std::string& what) {
  std::fprintf(stderr, "antdt fuzz: contract broken: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

namespace {
// A decoder may reject its input with an antdt::Error; that is the contract, not a finding.
void run_one(std::span<const std::byte> input) {
  try {
    run(input);
  } catch (const Error&) {
  }
}
}  // namespace

}  // namespace antdt::fuzz

#if defined(ANTDT_FUZZ_LIBFUZZER)

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  antdt::fuzz::run_one(std::as_bytes(std::span(data, size)));
  return 0;
}

#else

// Replays every file named on the command line, or found (recursively) in a directory named
// there. Exits 1 if an input throws anything but antdt::Error (fail() aborts instead).
int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    const fs::path arg(argv[i]);
    if (fs::is_directory(arg)) {
      for (const auto& entry : fs::recursive_directory_iterator(arg)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
    } else {
      files.push_back(arg);
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
    return 2;
  }
  int failures = 0;
  for (const auto& path : files) {
    std::ifstream in(path, std::ios::binary);
    const std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::byte> bytes(chars.size());
    for (std::size_t i = 0; i < chars.size(); ++i) bytes[i] = static_cast<std::byte>(chars[i]);
    try {
      antdt::fuzz::run_one(bytes);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: not an antdt::Error: %s\n", path.c_str(), e.what());
      ++failures;
    }
  }
  std::printf("replayed %zu inputs, %d failed\n", files.size(), failures);
  return failures == 0 ? 0 : 1;
}

#endif
