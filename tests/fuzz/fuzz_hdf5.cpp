// Fuzz target hdf5_data: the HDF5 data reader (data::Hdf5Dataset) on any file. The input is
// the file's bytes; byte 0 of the input is not special, the whole input is the file. The
// reader must reject a bad file with a FileError (one line, naming the file) and never
// crash, hang or allocate what the file cannot back; a file it accepts must read every
// sample, with labels in [0, num_classes), and pass the non-finite scan.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "antdt/data.hpp"
#include "fuzz_target.hpp"

namespace antdt::fuzz {

namespace {

// One file per process, rewritten for every input (libFuzzer runs inputs one after another).
const std::string& scratch_path() {
  static const std::string path = [] {
    const char* dir = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    return std::string(dir) + "/antdt-fuzz-hdf5-" + std::to_string(::getpid()) + ".h5";
  }();
  return path;
}

void write_file(const std::string& path, std::span<const std::byte> bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) fail("cannot create the scratch file " + path);
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) fail("cannot write the scratch file " + path);
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
}

}  // namespace

void run(std::span<const std::byte> input) {
  const std::string& path = scratch_path();
  write_file(path, input);
  struct Cleanup {
    const std::string& p;
    ~Cleanup() { ::unlink(p.c_str()); }
  } cleanup{path};
  std::unique_ptr<data::Dataset> set;
  try {
    set = std::make_unique<data::Hdf5Dataset>(path);
  } catch (const FileError& e) {
    const std::string what = e.what();
    require(what.find('\n') == std::string::npos, "a multi-line FileError: " + what);
    require(what.find(path) != std::string::npos, "a FileError that does not name the file: " + what);
    throw;
  } catch (const Error& e) {
    fail(std::string("Hdf5Dataset rejected a file with an antdt::Error that is not a FileError: ") + e.what());
  }
  const std::int64_t n = set->size(), dim = set->dim();
  const std::int32_t classes = set->num_classes();
  require(n >= 1 && dim >= 1 && classes >= 1, "an accepted data set with N, D or the class count < 1");
  // Every sample, in runs of up to 64 and with a few repeated, shuffled indices: a read of an
  // accepted file may fail only with a FileError (a damaged raw data block).
  must("the non-finite scan", [&] {
    try {
      (void)data::find_non_finite(*set, 0, n, 64);
    } catch (const FileError&) {
    }
  });
  std::vector<std::int64_t> idx{n - 1, 0, n / 2, n - 1};
  std::vector<float> x(idx.size() * static_cast<std::size_t>(dim));
  std::vector<std::int32_t> y(idx.size());
  try {
    set->read(idx, x.data(), y.data());
  } catch (const FileError&) {
    return;
  }
  for (const std::int32_t label : y) require(label >= 0 && label < classes, "a label outside [0, num_classes)");
}

}  // namespace antdt::fuzz
