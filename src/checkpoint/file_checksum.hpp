// Private: the whole-file checksum of a checkpoint, checked on the raw bytes before HDF5 parses
// anything (docs/checkpoint.md, "File checksum").
//
// HDF5 does not survive every damaged file: a flipped bit in some metadata made it corrupt the
// heap while reading (a crash inside the reader, or later at exit), so a damaged checkpoint
// could take the whole job down instead of being skipped. Every checkpoint therefore starts
// with a 512-byte header in HDF5's user block (which HDF5 skips: h5dump and h5py still read the
// file), plain text padded with NULs:
//
//   antdt checkpoint\n
//   size <bytes of the whole file, decimal>\n
//   fnv1a64 <16 lowercase hex digits>\n
//
// The hash covers every byte after the header; the header itself must be exactly what its own
// values render to, so any change to it is caught as well. A file that starts with the HDF5
// signature instead has no header: it was written before antdt stored file checksums, and is
// read as before (FileCheck::legacy).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/fnv1a.hpp"
#include "checkpoint/posix_file.hpp"

namespace antdt::checkpoint {

// HDF5 user blocks are a power of two >= 512; the header needs far less.
inline constexpr std::size_t kFileHeaderSize = 512;
inline constexpr std::string_view kFileHeaderMagic = "antdt checkpoint\n";
inline constexpr std::array<unsigned char, 8> kHdf5Signature = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};

// The header of a file of `size` bytes whose bytes after the header hash to `hash`: exactly
// kFileHeaderSize bytes.
[[nodiscard]] inline std::vector<std::byte> render_file_header(std::uint64_t size, std::uint64_t hash) {
  char text[128];
  const int n = std::snprintf(text, sizeof text, "%.*ssize %" PRIu64 "\nfnv1a64 %016" PRIx64 "\n",
                              static_cast<int>(kFileHeaderMagic.size()), kFileHeaderMagic.data(), size, hash);
  std::vector<std::byte> header(kFileHeaderSize, std::byte{0});
  std::memcpy(header.data(), text, static_cast<std::size_t>(n));
  return header;
}

// What the raw bytes of a checkpoint file say, before HDF5 looks at it.
struct FileCheck {
  enum class Result {
    intact,   // a header, and the bytes match it: safe to hand to HDF5
    legacy,   // no header, an HDF5 file from before file checksums: read as before
    damaged,  // anything else; `why` says what, in words that follow "checkpoint '<path>' "
  };
  Result result = Result::damaged;
  std::string why;
};

// Reads the file in pieces (never the whole file at once) and checks it against its header.
[[nodiscard]] inline FileCheck check_file(const std::string& path) {
  using R = FileCheck::Result;
  const auto damaged = [](std::string why) { return FileCheck{R::damaged, std::move(why)}; };
  const detail::FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return damaged(std::string("cannot be opened: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return damaged(std::string("cannot be inspected: ") + std::strerror(errno));
  const auto file_size = static_cast<std::uint64_t>(st.st_size);

  std::vector<std::byte> buffer(std::size_t{1} << 20);
  // Reads up to `want` bytes into the buffer; the count read, or -1 (errno set).
  const auto read_some = [&](std::size_t want) -> ssize_t {
    std::size_t got = 0;
    while (got < want) {
      const ssize_t n = ::read(fd.get(), buffer.data() + got, want - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return -1;
      if (n == 0) break;
      got += static_cast<std::size_t>(n);
    }
    return static_cast<ssize_t>(got);
  };
  const ssize_t head = read_some(kFileHeaderSize);
  if (head < 0) return damaged(std::string("cannot be read: ") + std::strerror(errno));
  const auto head_size = static_cast<std::size_t>(head);
  if (head_size >= kHdf5Signature.size() &&
      std::memcmp(buffer.data(), kHdf5Signature.data(), kHdf5Signature.size()) == 0) {
    return {R::legacy, {}};
  }
  const std::string_view text(reinterpret_cast<const char*>(buffer.data()), head_size);
  if (text.substr(0, kFileHeaderMagic.size()) != kFileHeaderMagic) {
    return damaged(
        "is not an HDF5 file nor an antdt checkpoint (it starts with neither antdt's checkpoint header nor the HDF5 "
        "signature); it is damaged or another file");
  }
  if (head_size < kFileHeaderSize) {
    return damaged("is truncated: " + std::to_string(file_size) + " bytes, less than its own header");
  }
  std::uint64_t size = 0;
  std::uint64_t hash = 0;
  char line_end = 0;
  const std::string fields(text.substr(kFileHeaderMagic.size(), 96));
  if (std::sscanf(fields.c_str(), "size %" SCNu64 "\nfnv1a64 %16" SCNx64 "%c", &size, &hash, &line_end) != 3 ||
      line_end != '\n' || std::memcmp(render_file_header(size, hash).data(), buffer.data(), kFileHeaderSize) != 0) {
    return damaged("has a damaged header (its first " + std::to_string(kFileHeaderSize) +
                   " bytes, which hold the file's size and checksum)");
  }
  if (file_size < size) {
    return damaged("is truncated: " + std::to_string(file_size) + " bytes of the " + std::to_string(size) +
                   " its header records");
  }
  if (file_size > size) {
    return damaged("has " + std::to_string(file_size) + " bytes but its header records " + std::to_string(size) +
                   "; it was changed after it was written");
  }
  std::uint64_t actual = kFnv1a64Offset;
  for (std::uint64_t left = size - kFileHeaderSize; left > 0;) {
    const std::size_t want = left < buffer.size() ? static_cast<std::size_t>(left) : buffer.size();
    const ssize_t n = read_some(want);
    if (n < 0) return damaged(std::string("cannot be read: ") + std::strerror(errno));
    if (static_cast<std::size_t>(n) != want) return damaged("is truncated: it ended while being read");
    actual = fnv1a64(std::span(buffer.data(), want), actual);
    left -= want;
  }
  if (actual != hash) {
    char values[80];
    std::snprintf(values, sizeof values, "stored %016" PRIx64 ", computed %016" PRIx64, hash, actual);
    return damaged(std::string("fails its file checksum (") + values + "): its bytes changed after it was written");
  }
  return {R::intact, {}};
}

}  // namespace antdt::checkpoint
