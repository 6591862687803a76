// HDF5 checkpoint store (docs/checkpoint.md).
//
// File layout (format version 1):
//   /                      root group; attributes antdt_format_version (int64),
//                          antdt_version (string), step (int64), antdt_complete (int64 = 1,
//                          written last)
//   /<name>                one data set per put_*; '/' in a name makes groups. Its HDF5 type
//                          and shape say what it is (float32[n], int64[n], uint64[n],
//                          uint8[n] for bytes, int64 scalar, float64 scalar, fixed-length
//                          string scalar, or a null dataspace for the empty string).
//   /<name>@antdt_fnv1a64  uint64 attribute: FNV-1a 64 of the data set's bytes as held in
//                          memory (native little-endian).
//
// Atomicity: the HDF5 file is built in memory (HDF5's core driver, no backing store), and
// commit() writes its image to <dir>/.ckpt-<step>.h5.tmp, which no reader looks at, with plain
// write(2) calls, fsyncs it, renames it to ckpt-<step:08>.h5 (rename(2) is atomic and
// replaces an existing file) and fsyncs the directory so the rename itself is durable. A crash
// at any point leaves either the old set of checkpoints or the new one.
//
// Why in memory: HDF5 never sees a failed write. With HDF5 writing the file itself, a full or
// read-only disk failed a write or a flush, the close that followed failed as well, and HDF5
// 1.10 kept the half-closed file in its tables: closing the library (at exit, or inside
// MPI_Finalize) then crashed on it. Now every disk error is a write(2), fsync(2) or close(2)
// of ours, reported with the system's message. The cost: the checkpoint's bytes are held in
// memory (the image, beside the caller's copy) from the first put until the commit.
//
// Integrity: the file is written with the 1.8 format as the lowest bound, so HDF5 itself
// checksums its metadata (superblock v2, object headers v2); our per-data-set checksum
// covers the raw data, which HDF5 does not checksum without filters.
#include "checkpoint/checkpoint.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <span>
#include <system_error>
#include <utility>
#include <vector>

#include "antdt/config.hpp"
#include "antdt/error.hpp"
#include "checkpoint/file_checksum.hpp"
#include "checkpoint/fnv1a.hpp"
#include "checkpoint/h5.hpp"
#include "checkpoint/posix_file.hpp"
#include "checkpoint/store_names.hpp"
#include "core/log.hpp"

namespace fs = std::filesystem;

// H5Pset_file_locking appeared in 1.10.7 and 1.12.1; older libraries honour only the
// HDF5_USE_FILE_LOCKING=FALSE environment variable.
#if (H5_VERS_MAJOR == 1 && H5_VERS_MINOR == 10 && H5_VERS_RELEASE >= 7) || H5_VERSION_GE(1, 12, 1)
#define ANTDT_H5_HAS_FILE_LOCKING 1
#else
#define ANTDT_H5_HAS_FILE_LOCKING 0
#endif

namespace antdt {

namespace {

using detail::h5_error_message;
using detail::H5Handle;
using detail::H5QuietErrors;

constexpr const char* kAttrFormatVersion = "antdt_format_version";
constexpr const char* kAttrVersion = "antdt_version";
constexpr const char* kAttrStep = "step";
constexpr const char* kAttrComplete = "antdt_complete";
constexpr const char* kAttrChecksum = "antdt_fnv1a64";
constexpr const char* kFilePrefix = "ckpt-";
constexpr const char* kFileSuffix = ".h5";
constexpr const char* kTmpPrefix = ".ckpt-";
constexpr const char* kTmpSuffix = ".h5.tmp";
// The in-memory file grows in steps of this many bytes.
constexpr std::size_t kCoreIncrement = std::size_t{4} << 20;

H5Handle h5_object(hid_t id) { return {id, H5Oclose}; }

// ---------------------------------------------------------------------------------------
// Names and file names
// ---------------------------------------------------------------------------------------

bool valid_component(std::string_view c) {
  if (c.empty() || c == "." || c == "..") return false;
  return std::all_of(c.begin(), c.end(), [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' ||
           ch == '.';
  });
}

// Splits "a/b/c" into components; empty result if the name is invalid.
std::vector<std::string> split_name(const std::string& name) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t slash = name.find('/', start);
    const std::string part = name.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (!valid_component(part)) return {};
    parts.push_back(part);
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return parts;
}

std::vector<std::string> require_valid_name(const std::string& name) {
  auto parts = split_name(name);
  if (parts.empty()) {
    throw UsageError("invalid checkpoint entry name '" + name +
                     "': use components of [A-Za-z0-9_.-] separated by single '/', e.g. 'model/params'");
  }
  return parts;
}

std::string final_name(std::int64_t step) {
  char digits[32];
  std::snprintf(digits, sizeof digits, "%08lld", static_cast<long long>(step));
  return std::string(kFilePrefix) + digits + kFileSuffix;
}

std::string tmp_name(std::int64_t step) { return std::string(kTmpPrefix) + std::to_string(step) + kTmpSuffix; }

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

// The step of a committed checkpoint file name "ckpt-<digits>.h5", or nullopt.
std::optional<std::int64_t> parse_final_name(std::string_view file) {
  if (!starts_with(file, kFilePrefix) || !ends_with(file, kFileSuffix)) return std::nullopt;
  const std::string_view digits =
      file.substr(std::strlen(kFilePrefix), file.size() - std::strlen(kFilePrefix) - std::strlen(kFileSuffix));
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  std::int64_t step = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return step;
}

bool is_tmp_name(std::string_view file) { return starts_with(file, kTmpPrefix) && ends_with(file, kTmpSuffix); }

struct Listing {
  std::vector<std::pair<std::int64_t, fs::path>> committed;  // sorted by step, oldest first
  std::vector<fs::path> temporaries;
};

Listing scan_directory(const fs::path& directory) {
  Listing listing;
  std::error_code ec;
  if (!fs::is_directory(directory, ec)) return listing;
  fs::directory_iterator it(directory, ec);
  if (ec) throw FileError("cannot list checkpoint directory '" + directory.string() + "': " + ec.message());
  for (const fs::directory_entry& entry : it) {
    const std::string file = entry.path().filename().string();
    if (is_tmp_name(file)) {
      listing.temporaries.push_back(entry.path());
    } else if (auto step = parse_final_name(file)) {
      if (entry.is_regular_file(ec)) listing.committed.emplace_back(*step, entry.path());
    }
  }
  std::sort(listing.committed.begin(), listing.committed.end());
  std::sort(listing.temporaries.begin(), listing.temporaries.end());
  return listing;
}

// ---------------------------------------------------------------------------------------
// POSIX durability
// ---------------------------------------------------------------------------------------

// fsync works on a read-only descriptor on Linux and POSIX systems antdt targets; for a
// directory it makes the entries (our rename) durable.
void fsync_path(const fs::path& path, bool directory) {
  const int fd = ::open(path.c_str(), O_RDONLY | (directory ? O_DIRECTORY : 0) | O_CLOEXEC);
  if (fd < 0) {
    throw WriteError("cannot open '" + path.string() + "' to fsync it: " + std::strerror(errno));
  }
  const int rc = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  if (rc != 0) throw WriteError("fsync of '" + path.string() + "' failed: " + std::strerror(saved));
}

void remove_quietly(const fs::path& path, const char* why) noexcept {
  std::error_code ec;
  fs::remove(path, ec);
  if (ec) {
    try {
      ANTDT_LOG(warn) << "cannot remove " << why << " '" << path.string() << "': " << ec.message();
    } catch (...) {  // logging must not turn cleanup into a throw
    }
  }
}

// ---------------------------------------------------------------------------------------
// HDF5 helpers
// ---------------------------------------------------------------------------------------

// File access properties shared by writer and reader. File locking is off: the writer's
// temporary file is private to it and a committed file is never written again, so there is
// nothing to exclude, and flock() fails on some parallel file systems (Lustre without
// -o flock), which would make every open fail there.
H5Handle make_fapl(bool for_writing) {
  H5Handle fapl = detail::h5_plist(H5Pcreate(H5P_FILE_ACCESS));
  ANTDT_CHECK_HDF5(fapl.get());
#if ANTDT_H5_HAS_FILE_LOCKING
  ANTDT_CHECK_HDF5(H5Pset_file_locking(fapl.get(), false, true));
#endif
  if (for_writing) {
    // Lowest bound 1.8: superblock v2 and object header v2, which carry checksums.
    ANTDT_CHECK_HDF5(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_LATEST));
    // STRONG: closing the file closes it for real (and fails loudly if we leaked an id), so
    // the bytes are in the file before fsync and rename.
    ANTDT_CHECK_HDF5(H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG));
  }
  return fapl;
}

template <class T>
std::span<const std::byte> as_bytes_of(const T& value) {
  return {reinterpret_cast<const std::byte*>(&value), sizeof(T)};
}

// The kinds of entry, and how each looks in the file.
enum class Kind { floats, doubles, int64s, uint64s, bytes, int64, real, string };

struct KindSpec {
  const char* label;  // as shown in messages
  H5T_class_t type_class;
  std::size_t size;  // element size in bytes; 0 for strings (any size)
  H5T_sign_t sign;   // H5T_SGN_ERROR when not an integer
  bool array;        // 1-D array (true) or a single value (false)
  const char* writer;
};

KindSpec spec_of(Kind kind) {
  switch (kind) {
    case Kind::floats:
      return {"float32[]", H5T_FLOAT, 4, H5T_SGN_ERROR, true, "put_floats"};
    case Kind::doubles:
      return {"float64[]", H5T_FLOAT, 8, H5T_SGN_ERROR, true, "put_doubles"};
    case Kind::int64s:
      return {"int64[]", H5T_INTEGER, 8, H5T_SGN_2, true, "put_int64s"};
    case Kind::uint64s:
      return {"uint64[]", H5T_INTEGER, 8, H5T_SGN_NONE, true, "put_uint64s"};
    case Kind::bytes:
      return {"uint8[] (bytes)", H5T_INTEGER, 1, H5T_SGN_NONE, true, "put_bytes"};
    case Kind::int64:
      return {"int64 scalar", H5T_INTEGER, 8, H5T_SGN_2, false, "put_int64"};
    case Kind::real:
      return {"float64 scalar", H5T_FLOAT, 8, H5T_SGN_ERROR, false, "put_double"};
    case Kind::string:
      return {"string", H5T_STRING, 0, H5T_SGN_ERROR, false, "put_string"};
  }
  return {"?", H5T_NO_CLASS, 0, H5T_SGN_ERROR, false, "?"};
}

hid_t native_type(Kind kind) {
  switch (kind) {
    case Kind::floats:
      return H5T_NATIVE_FLOAT;
    case Kind::doubles:
      return H5T_NATIVE_DOUBLE;
    case Kind::int64s:
    case Kind::int64:
      return H5T_NATIVE_INT64;
    case Kind::uint64s:
      return H5T_NATIVE_UINT64;
    case Kind::bytes:
      return H5T_NATIVE_UINT8;
    case Kind::real:
      return H5T_NATIVE_DOUBLE;
    case Kind::string:
      break;
  }
  return H5I_INVALID_HID;
}

// A fixed-length string type of exactly `length` bytes (>= 1), padded with nulls so that
// no byte of the value is ever taken for a terminator.
H5Handle string_type(std::size_t length) {
  H5Handle type = detail::h5_type(H5Tcopy(H5T_C_S1));
  ANTDT_CHECK_HDF5(type.get());
  ANTDT_CHECK_HDF5(H5Tset_size(type.get(), length));
  ANTDT_CHECK_HDF5(H5Tset_strpad(type.get(), H5T_STR_NULLPAD));
  return type;
}

// "float32[12]", "int64 scalar", "string(5)", "group"... for error messages. Never throws
// an HDF5 error (it is called while reporting one).
std::string describe(hid_t type, hid_t space) {
  std::string what;
  const H5T_class_t cls = H5Tget_class(type);
  const std::size_t size = H5Tget_size(type);
  switch (cls) {
    case H5T_INTEGER:
      what = std::string(H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(size * 8);
      break;
    case H5T_FLOAT:
      what = "float" + std::to_string(size * 8);
      break;
    case H5T_STRING:
      what = H5Tis_variable_str(type) > 0 ? "variable-length string" : "string(" + std::to_string(size) + ")";
      break;
    case H5T_COMPOUND:
      what = "compound";
      break;
    case H5T_OPAQUE:
      what = "opaque";
      break;
    case H5T_ARRAY:
      what = "array type";
      break;
    default:
      what = "type class " + std::to_string(static_cast<int>(cls));
      break;
  }
  const H5S_class_t space_class = H5Sget_simple_extent_type(space);
  if (space_class == H5S_SCALAR) return what + " scalar";
  if (space_class == H5S_NULL) return what + " (empty)";
  const int rank = H5Sget_simple_extent_ndims(space);
  if (rank < 0 || rank > 32) return what + "[?]";
  hsize_t dims[32];
  H5Sget_simple_extent_dims(space, dims, nullptr);
  what += "[";
  for (int i = 0; i < rank; ++i) what += (i ? " x " : "") + std::to_string(dims[i]);
  return what + "]";
}

}  // namespace

// =======================================================================================
// Writer
// =======================================================================================

namespace {

using detail::FileDescriptor;

// The memory of HDF5's in-memory file (core driver), through its file image callbacks: HDF5
// allocates and grows it with ours, and at close hands it to image_free, which keeps it here
// instead of freeing it. So the finished file (superblock rewritten by the close) is written
// without a copy. (H5Fget_file_image was no use: HDF5 1.10 clears the superblock's
// write-access flags in its copy without renewing the checksum, and the copy cannot be read.)
struct CoreImage {
  std::size_t allocated = 0;  // bytes of the current buffer
  void* closed = nullptr;     // the buffer of the closed file, now ours
  CoreImage() = default;
  CoreImage(const CoreImage&) = delete;
  CoreImage& operator=(const CoreImage&) = delete;
  ~CoreImage() { std::free(closed); }

  static void* allocate(std::size_t size, H5FD_file_image_op_t, void* self) {
    void* p = std::malloc(size);
    if (p) static_cast<CoreImage*>(self)->allocated = size;
    return p;
  }
  static void* copy(void* dest, const void* src, std::size_t size, H5FD_file_image_op_t, void*) {
    return std::memcpy(dest, src, size);
  }
  static void* resize(void* ptr, std::size_t size, H5FD_file_image_op_t, void* self) {
    void* p = std::realloc(ptr, size);
    if (p) static_cast<CoreImage*>(self)->allocated = size;
    return p;
  }
  static herr_t release(void* ptr, H5FD_file_image_op_t op, void* self) {
    auto* image = static_cast<CoreImage*>(self);
    if (op == H5FD_FILE_IMAGE_OP_FILE_CLOSE) {
      std::free(image->closed);
      image->closed = ptr;
    } else {
      std::free(ptr);
    }
    return 0;
  }
  static void* same(void* self) { return self; }
  static herr_t keep(void*) { return 0; }
};

// The end-of-file address a finished file's superblock records: its size. The writer's files
// have their superblock after the user block that holds antdt's header (at kFileHeaderSize),
// version 2 or 3 (format 1.8 or later), whose layout is: signature (8 bytes), version, size of
// offsets (O), size of lengths, flags (1 byte each), then base address, superblock extension
// address, end-of-file address, root object header address (O bytes each, little-endian),
// checksum (4). The end-of-file address is absolute (it counts the user block). Returns 0 when
// the bytes are not such a superblock.
std::size_t superblock_end_of_file(const std::byte* image, std::size_t size) {
  using checkpoint::kFileHeaderSize;
  using checkpoint::kHdf5Signature;
  if (size < kFileHeaderSize + 12) return 0;
  const std::byte* sb = image + kFileHeaderSize;
  if (std::memcmp(sb, kHdf5Signature.data(), kHdf5Signature.size()) != 0) return 0;
  const auto version = static_cast<unsigned>(sb[8]);
  const auto offset_size = static_cast<std::size_t>(sb[9]);
  if ((version != 2 && version != 3) || offset_size < 1 || offset_size > 8 ||
      size < kFileHeaderSize + 12 + 4 * offset_size + 4)
    return 0;
  std::uint64_t eof = 0;
  for (std::size_t i = 0; i < offset_size; ++i) {
    eof |= static_cast<std::uint64_t>(sb[12 + 2 * offset_size + i]) << (8 * i);
  }
  return eof > kFileHeaderSize && eof <= size ? static_cast<std::size_t>(eof) : 0;
}
}  // namespace

namespace detail {
struct CheckpointWriterState {
  fs::path directory;
  std::int64_t step = 0;
  fs::path tmp_path;
  FileDescriptor tmp;  // the temporary file, created empty by the constructor
  CoreImage image;     // before `file`, which must close first
  H5Handle file;       // in memory (core driver): nothing reaches the disk before commit()
  std::set<std::string> data_sets;
  std::set<std::string> groups;
  bool committed = false;
};
}  // namespace detail

namespace {

[[noreturn]] void throw_write_error(const detail::CheckpointWriterState& s, const std::string& name,
                                    const std::string& what) {
  throw WriteError("checkpoint '" + s.tmp_path.string() + "': cannot write data set '" + name + "': " + what);
}

detail::CheckpointWriterState& usable(const std::unique_ptr<detail::CheckpointWriterState>& state) {
  if (!state) throw UsageError("CheckpointWriter used after it was moved from");
  if (state->committed) throw UsageError("CheckpointWriter used after commit(); start a new writer for the next step");
  return *state;
}

// Reserves `name` (checking it against data sets and groups already made) and creates its
// parent groups. Returns the location id of the parent group and the leaf name.
std::pair<H5Handle, std::string> prepare_entry(detail::CheckpointWriterState& s, const std::string& name) {
  const std::vector<std::string> parts = require_valid_name(name);
  if (s.data_sets.count(name)) {
    throw UsageError("checkpoint entry '" + name + "' was already put; each name may be written once");
  }
  if (s.groups.count(name)) {
    throw UsageError("checkpoint entry '" + name + "' clashes with a group of that name (an entry '" + name +
                     "/...' exists)");
  }
  std::string prefix;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    prefix += (i ? "/" : "") + parts[i];
    if (s.data_sets.count(prefix)) {
      throw UsageError("checkpoint entry '" + name + "' needs a group '" + prefix + "', which is already a data set");
    }
  }
  H5Handle parent = detail::h5_group(H5Gopen2(s.file.get(), "/", H5P_DEFAULT));
  if (!parent.valid()) throw_write_error(s, name, h5_error_message());
  prefix.clear();
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    prefix += (i ? "/" : "") + parts[i];
    hid_t next_id = H5I_INVALID_HID;
    if (s.groups.count(prefix)) {
      next_id = H5Gopen2(parent.get(), parts[i].c_str(), H5P_DEFAULT);
    } else {
      next_id = H5Gcreate2(parent.get(), parts[i].c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    }
    H5Handle next = detail::h5_group(next_id);
    if (!next.valid()) throw_write_error(s, name, "cannot create group '" + prefix + "': " + h5_error_message());
    s.groups.insert(prefix);
    parent = std::move(next);
  }
  return {std::move(parent), parts.back()};
}

// Writes one data set. `file_type`/`mem_type`: HDF5 types; `count`: elements for an array,
// -1 for a scalar, -2 for a null dataspace (the empty string). `data`/`nbytes`: the bytes
// in memory, which the checksum covers.
void write_entry(detail::CheckpointWriterState& s, const std::string& name, hid_t type, std::int64_t count,
                 const void* data, std::size_t nbytes) {
  auto [parent, leaf] = prepare_entry(s, name);
  H5Handle space;
  if (count >= 0) {
    const hsize_t dims[1] = {static_cast<hsize_t>(count)};
    space = detail::h5_dataspace(H5Screate_simple(1, dims, nullptr));
  } else {
    space = detail::h5_dataspace(H5Screate(count == -1 ? H5S_SCALAR : H5S_NULL));
  }
  if (!space.valid()) throw_write_error(s, name, h5_error_message());
  H5Handle dset = detail::h5_dataset(
      H5Dcreate2(parent.get(), leaf.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (!dset.valid()) throw_write_error(s, name, h5_error_message());
  // A zero-element write is skipped: there is nothing to write and no buffer to point at.
  if (nbytes > 0 && H5Dwrite(dset.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) {
    throw_write_error(s, name, h5_error_message());
  }
  const std::uint64_t checksum = checkpoint::fnv1a64({static_cast<const std::byte*>(data), nbytes});
  H5Handle attr_space = detail::h5_dataspace(H5Screate(H5S_SCALAR));
  H5Handle attr = detail::h5_attribute(
      H5Acreate2(dset.get(), kAttrChecksum, H5T_STD_U64LE, attr_space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!attr_space.valid() || !attr.valid() || H5Awrite(attr.get(), H5T_NATIVE_UINT64, &checksum) < 0) {
    throw_write_error(s, name, "cannot write its checksum: " + h5_error_message());
  }
  s.data_sets.insert(name);
}

void write_root_attribute(detail::CheckpointWriterState& s, const char* attr_name, hid_t file_type, hid_t mem_type,
                          const void* value) {
  H5Handle space = detail::h5_dataspace(H5Screate(H5S_SCALAR));
  H5Handle attr =
      detail::h5_attribute(H5Acreate2(s.file.get(), attr_name, file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!space.valid() || !attr.valid() || H5Awrite(attr.get(), mem_type, value) < 0) {
    throw WriteError("checkpoint '" + s.tmp_path.string() + "': cannot write attribute '" + attr_name +
                     "': " + h5_error_message());
  }
}

// Writes the image into the temporary file, fsyncs and closes it; any failure (a full or
// read-only disk, an I/O error) is a WriteError with the system's message.
void write_image(detail::CheckpointWriterState& s, std::span<const std::byte> image) {
  const int fd = s.tmp.get();
  auto fail = [&](const char* what) {
    const int saved = errno;
    throw WriteError("checkpoint '" + s.tmp_path.string() + "': " + what + " failed: " + std::strerror(saved));
  };
  if (!detail::write_all(fd, image)) fail("write");
  if (::fsync(fd) != 0) fail("fsync");
  // close(2) can report a deferred write error (NFS): it is checked, and never retried.
  if (::close(s.tmp.release()) != 0) fail("close");
}

}  // namespace

CheckpointWriter::CheckpointWriter(std::string directory, std::int64_t step)
    : state_(std::make_unique<detail::CheckpointWriterState>()) {
  if (step < 0) throw UsageError("checkpoint step must be >= 0, got " + std::to_string(step));
  if (directory.empty()) throw UsageError("checkpoint directory must not be empty");
  H5QuietErrors quiet;
  auto& s = *state_;
  s.directory = fs::path(std::move(directory));
  s.step = step;
  std::error_code ec;
  fs::create_directories(s.directory, ec);
  if (ec || !fs::is_directory(s.directory)) {
    throw WriteError("cannot create checkpoint directory '" + s.directory.string() +
                     "': " + (ec ? ec.message() : std::string("not a directory")));
  }
  s.tmp_path = s.directory / tmp_name(step);
  // Created now, so that an unwritable directory fails here rather than after the step's
  // state was gathered. TRUNC: a temporary file of the same step left by a crashed run is
  // simply replaced.
  s.tmp = FileDescriptor(::open(s.tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (s.tmp.get() < 0) {
    throw WriteError("cannot create checkpoint file '" + s.tmp_path.string() + "': " + std::strerror(errno) +
                     "; check that the directory is writable and has space");
  }
  H5Handle fapl = make_fapl(true);
  ANTDT_CHECK_HDF5(H5Pset_fapl_core(fapl.get(), kCoreIncrement, /*backing_store=*/false));
  H5FD_file_image_callbacks_t callbacks{
      &CoreImage::allocate, &CoreImage::copy, &CoreImage::resize, &CoreImage::release, &CoreImage::same,
      &CoreImage::keep,     &s.image};
  ANTDT_CHECK_HDF5(H5Pset_file_image_callbacks(fapl.get(), &callbacks));
  // The user block is where commit() puts the header with the file's size and checksum.
  H5Handle fcpl = detail::h5_plist(H5Pcreate(H5P_FILE_CREATE));
  ANTDT_CHECK_HDF5(fcpl.get());
  ANTDT_CHECK_HDF5(H5Pset_userblock(fcpl.get(), checkpoint::kFileHeaderSize));
  s.file = detail::h5_file(H5Fcreate(s.tmp_path.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get()));
  if (!s.file.valid()) {
    s.tmp = FileDescriptor();
    remove_quietly(s.tmp_path, "checkpoint file");
    throw WriteError("cannot create checkpoint '" + s.tmp_path.string() + "' in memory: " + h5_error_message());
  }
}

CheckpointWriter::CheckpointWriter(CheckpointWriter&&) noexcept = default;
CheckpointWriter& CheckpointWriter::operator=(CheckpointWriter&& other) noexcept {
  if (this != &other) {
    CheckpointWriter discarded(std::move(*this));  // cleans up our uncommitted file
    state_ = std::move(other.state_);
  }
  return *this;
}

CheckpointWriter::~CheckpointWriter() {
  if (!state_ || state_->committed) return;
  H5QuietErrors quiet;
  state_->file.reset();
  state_->tmp = FileDescriptor();
  remove_quietly(state_->tmp_path, "uncommitted checkpoint");
}

std::int64_t CheckpointWriter::step() const noexcept { return state_ ? state_->step : -1; }

void CheckpointWriter::put_floats(const std::string& name, std::span<const float> values) {
  auto& s = usable(state_);
  H5QuietErrors quiet;
  write_entry(s, name, H5T_NATIVE_FLOAT, static_cast<std::int64_t>(values.size()), values.data(), values.size_bytes());
}

void CheckpointWriter::put_doubles(const std::string& name, std::span<const double> values) {
  auto& s = usable(state_);
  H5QuietErrors quiet;
  write_entry(s, name, H5T_NATIVE_DOUBLE, static_cast<std::int64_t>(values.size()), values.data(), values.size_bytes());
}

void CheckpointWriter::put_int64s(const std::string& name, std::span<const std::int64_t> values) {
  auto& s = usable(state_);
  H5QuietErrors quiet;
  write_entry(s, name, H5T_NATIVE_INT64, static_cast<std::int64_t>(values.size()), values.data(), values.size_bytes());
}

void CheckpointWriter::put_uint64s(const std::string& name, std::span<const std::uint64_t> values) {
  auto& s = usable(state_);
  H5QuietErrors quiet;
  write_entry(s, name, H5T_NATIVE_UINT64, static_cast<std::int64_t>(values.size()), values.data(), values.size_bytes());
}

void CheckpointWriter::put_bytes(const std::string& name, std::span<const std::byte> bytes) {
  auto& s = usable(state_);
  H5QuietErrors quiet;
  write_entry(s, name, H5T_NATIVE_UINT8, static_cast<std::int64_t>(bytes.size()), bytes.data(), bytes.size());
}

void CheckpointWriter::put_int64(const std::string& name, std::int64_t value) {
  auto& s = usable(state_);
  H5QuietErrors quiet;
  write_entry(s, name, H5T_NATIVE_INT64, -1, &value, sizeof value);
}

void CheckpointWriter::put_double(const std::string& name, double value) {
  auto& s = usable(state_);
  H5QuietErrors quiet;
  write_entry(s, name, H5T_NATIVE_DOUBLE, -1, &value, sizeof value);
}

void CheckpointWriter::put_string(const std::string& name, const std::string& value) {
  auto& s = usable(state_);
  H5QuietErrors quiet;
  // HDF5 has no zero-length fixed string: the empty string is a null dataspace.
  H5Handle type = string_type(std::max<std::size_t>(value.size(), 1));
  write_entry(s, name, type.get(), value.empty() ? -2 : -1, value.data(), value.size());
}

std::string CheckpointWriter::commit(int keep) {
  auto& s = usable(state_);
  if (keep < 1) throw UsageError("CheckpointWriter::commit: keep must be >= 1, got " + std::to_string(keep));
  H5QuietErrors quiet;
  const fs::path final_path = s.directory / final_name(s.step);
  try {
    const std::int64_t format_version = kCheckpointFormatVersion;
    write_root_attribute(s, kAttrFormatVersion, H5T_STD_I64LE, H5T_NATIVE_INT64, &format_version);
    const std::string version = ANTDT_VERSION_STRING;
    H5Handle version_type = string_type(version.size());
    write_root_attribute(s, kAttrVersion, version_type.get(), version_type.get(), version.data());
    write_root_attribute(s, kAttrStep, H5T_STD_I64LE, H5T_NATIVE_INT64, &s.step);
    // Written last: a file without it was not finished by a writer that got this far.
    const std::int64_t complete = 1;
    write_root_attribute(s, kAttrComplete, H5T_STD_I64LE, H5T_NATIVE_INT64, &complete);
    // The close touches memory only and hands the finished file to s.image; we write it.
    if (s.file.close() < 0) {
      throw WriteError("checkpoint '" + s.tmp_path.string() + "': cannot finish it in memory: " + h5_error_message());
    }
    auto* bytes = static_cast<std::byte*>(s.image.closed);
    const std::size_t size = bytes ? superblock_end_of_file(bytes, s.image.allocated) : 0;
    if (size == 0) {
      throw WriteError("checkpoint '" + s.tmp_path.string() + "': HDF5 did not hand back a finished file image");
    }
    // The header, in the user block HDF5 left for it: the size and the checksum of the rest,
    // which a reader checks before HDF5 parses anything (checkpoint/file_checksum.hpp).
    const std::uint64_t hash =
        checkpoint::fnv1a64({bytes + checkpoint::kFileHeaderSize, size - checkpoint::kFileHeaderSize});
    const std::vector<std::byte> header = checkpoint::render_file_header(size, hash);
    std::memcpy(bytes, header.data(), header.size());
    write_image(s, {bytes, size});
    std::error_code ec;
    fs::rename(s.tmp_path, final_path, ec);
    if (ec) {
      throw WriteError("cannot rename '" + s.tmp_path.string() + "' to '" + final_path.string() + "': " + ec.message());
    }
    s.committed = true;
    fsync_path(s.directory, true);
  } catch (const Error& e) {
    s.file.reset();
    s.tmp = FileDescriptor();
    if (!s.committed) {
      s.committed = true;  // the writer is spent either way
      remove_quietly(s.tmp_path, "failed checkpoint");
      throw WriteError("checkpoint commit of '" + final_path.string() +
                       "' failed, previous checkpoints kept: " + e.what());
    }
    throw WriteError("checkpoint '" + final_path.string() +
                     "' was renamed into place but may not be durable: " + e.what());
  }

  // Retention. Steps only move forward within a run, so a committed checkpoint with a larger
  // step than this one was left by a run that was abandoned (training resumed from an older
  // checkpoint); keeping it would make find_latest_checkpoint() pick it over this one.
  const Listing listing = scan_directory(s.directory);
  int older_kept = 0;
  for (auto it = listing.committed.rbegin(); it != listing.committed.rend(); ++it) {
    const auto& [step, path] = *it;
    if (step == s.step) continue;
    if (step > s.step) {
      ANTDT_LOG(warn) << "removing checkpoint '" << path.string() << "': its step " << step
                      << " is newer than the just-committed step " << s.step << ", so it is from an abandoned run";
      remove_quietly(path, "stale checkpoint");
    } else if (older_kept + 1 < keep) {
      ++older_kept;
    } else {
      remove_quietly(path, "old checkpoint");
    }
  }
  for (const fs::path& tmp : listing.temporaries) {
    ANTDT_LOG(info) << "removing stale temporary checkpoint '" << tmp.string() << "' (a write that never committed)";
    remove_quietly(tmp, "stale temporary checkpoint");
  }
  return final_path.string();
}

// =======================================================================================
// Reader
// =======================================================================================

namespace detail {
struct CheckpointReaderState {
  std::string path;
  H5Handle file;
  std::int64_t step = 0;
  std::int64_t format_version = 0;
  std::string antdt_version;
  bool file_checksum = false;  // the file carries antdt's header (false: written before it did)
};
}  // namespace detail

namespace {

[[noreturn]] void throw_bad_file(const std::string& path, const std::string& what) {
  throw CheckpointError("checkpoint '" + path + "': " + what);
}

[[noreturn]] void throw_bad_entry(const detail::CheckpointReaderState& s, const std::string& name,
                                  const std::string& what) {
  throw CheckpointError("checkpoint '" + s.path + "': data set '" + name + "' " + what);
}

// Reads a scalar int64 attribute of the root group; nullopt if absent. Throws on a wrong type.
std::optional<std::int64_t> root_int64_attribute(const std::string& path, hid_t file, const char* attr_name) {
  const htri_t exists = H5Aexists(file, attr_name);
  if (exists < 0) throw_bad_file(path, std::string("cannot read attribute '") + attr_name + "': " + h5_error_message());
  if (exists == 0) return std::nullopt;
  H5Handle attr = detail::h5_attribute(H5Aopen(file, attr_name, H5P_DEFAULT));
  H5Handle type = detail::h5_type(attr.valid() ? H5Aget_type(attr.get()) : H5I_INVALID_HID);
  H5Handle space = detail::h5_dataspace(attr.valid() ? H5Aget_space(attr.get()) : H5I_INVALID_HID);
  if (!attr.valid() || !type.valid() || !space.valid()) {
    throw_bad_file(path, std::string("cannot open attribute '") + attr_name + "': " + h5_error_message());
  }
  if (H5Tget_class(type.get()) != H5T_INTEGER || H5Tget_size(type.get()) != 8 ||
      H5Sget_simple_extent_type(space.get()) != H5S_SCALAR) {
    throw_bad_file(path, std::string("attribute '") + attr_name + "' is " + describe(type.get(), space.get()) +
                             ", expected an int64 scalar");
  }
  std::int64_t value = 0;
  if (H5Aread(attr.get(), H5T_NATIVE_INT64, &value) < 0) {
    throw_bad_file(path, std::string("cannot read attribute '") + attr_name + "': " + h5_error_message());
  }
  return value;
}

std::string root_string_attribute(const std::string& path, hid_t file, const char* attr_name) {
  if (H5Aexists(file, attr_name) <= 0) throw_bad_file(path, std::string("has no attribute '") + attr_name + "'");
  H5Handle attr = detail::h5_attribute(H5Aopen(file, attr_name, H5P_DEFAULT));
  H5Handle type = detail::h5_type(attr.valid() ? H5Aget_type(attr.get()) : H5I_INVALID_HID);
  H5Handle space = detail::h5_dataspace(attr.valid() ? H5Aget_space(attr.get()) : H5I_INVALID_HID);
  if (!attr.valid() || !type.valid() || !space.valid()) {
    throw_bad_file(path, std::string("cannot open attribute '") + attr_name + "': " + h5_error_message());
  }
  if (H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) != 0 ||
      H5Sget_simple_extent_type(space.get()) != H5S_SCALAR) {
    throw_bad_file(path, std::string("attribute '") + attr_name + "' is " + describe(type.get(), space.get()) +
                             ", expected a fixed-length string");
  }
  std::string value(H5Tget_size(type.get()), '\0');
  if (H5Aread(attr.get(), type.get(), value.data()) < 0) {
    throw_bad_file(path, std::string("cannot read attribute '") + attr_name + "': " + h5_error_message());
  }
  return value;
}

// Opens data set `name` (a path of groups), or throws naming the first missing component.
// With `missing_ok`, returns an invalid handle instead of throwing when something is
// missing or is not a data set.
H5Handle open_entry(const detail::CheckpointReaderState& s, const std::string& name, bool missing_ok) {
  const std::vector<std::string> parts = missing_ok ? split_name(name) : require_valid_name(name);
  if (parts.empty()) return {};
  H5Handle current = h5_object(H5Oopen(s.file.get(), "/", H5P_DEFAULT));
  if (!current.valid()) throw_bad_entry(s, name, "cannot be opened: " + h5_error_message());
  std::string prefix;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    prefix += (i ? "/" : "") + parts[i];
    const bool last = i + 1 == parts.size();
    const htri_t exists = H5Lexists(current.get(), parts[i].c_str(), H5P_DEFAULT);
    if (exists < 0) throw_bad_entry(s, name, "cannot be looked up: " + h5_error_message());
    if (exists == 0) {
      if (missing_ok) return {};
      throw_bad_entry(s, name,
                      last ? "is missing; the checkpoint was written without it (another antdt "
                             "version or a different configuration?)"
                           : "is missing: there is no group '" + prefix + "'");
    }
    H5Handle next = h5_object(H5Oopen(current.get(), parts[i].c_str(), H5P_DEFAULT));
    if (!next.valid()) throw_bad_entry(s, name, "cannot be opened at '" + prefix + "': " + h5_error_message());
    const H5I_type_t type = H5Iget_type(next.get());
    if (!last && type != H5I_GROUP) {
      if (missing_ok) return {};
      throw_bad_entry(s, name, "is missing: '" + prefix + "' is not a group");
    }
    if (last && type != H5I_DATASET) {
      if (missing_ok) return {};
      throw_bad_entry(s, name, "is a group, not a data set");
    }
    current = std::move(next);
  }
  return current;
}

// Opens, type-checks, reads and checksum-verifies one entry. Returns its bytes as they
// are in memory (elements of the native type of `kind`).
std::vector<std::byte> read_entry(const detail::CheckpointReaderState& s, const std::string& name, Kind kind,
                                  std::int64_t expected_count) {
  const KindSpec spec = spec_of(kind);
  H5Handle dset = open_entry(s, name, false);
  H5Handle type = detail::h5_type(H5Dget_type(dset.get()));
  H5Handle space = detail::h5_dataspace(H5Dget_space(dset.get()));
  if (!type.valid() || !space.valid()) throw_bad_entry(s, name, "cannot be inspected: " + h5_error_message());

  const H5T_class_t type_class = H5Tget_class(type.get());
  const std::size_t elem_size = H5Tget_size(type.get());
  const H5S_class_t space_class = H5Sget_simple_extent_type(space.get());
  bool type_ok = type_class == spec.type_class && (spec.size == 0 || elem_size == spec.size);
  if (type_ok && type_class == H5T_INTEGER) type_ok = H5Tget_sign(type.get()) == spec.sign;
  if (type_ok && type_class == H5T_STRING) type_ok = H5Tis_variable_str(type.get()) == 0;
  bool shape_ok = false;
  if (spec.array) {
    shape_ok = space_class == H5S_SIMPLE && H5Sget_simple_extent_ndims(space.get()) == 1;
  } else {
    shape_ok = space_class == H5S_SCALAR || (kind == Kind::string && space_class == H5S_NULL);
  }
  if (!type_ok || !shape_ok) {
    throw_bad_entry(s, name,
                    "has the wrong type: it is " + describe(type.get(), space.get()) + ", expected " + spec.label +
                        " (as written by " + spec.writer + ")");
  }

  std::int64_t count = 1;
  if (spec.array) {
    hsize_t dims[1] = {0};
    H5Sget_simple_extent_dims(space.get(), dims, nullptr);
    count = static_cast<std::int64_t>(dims[0]);
    if (expected_count >= 0 && count != expected_count) {
      throw_bad_entry(s, name,
                      "has " + std::to_string(count) + " elements, expected " + std::to_string(expected_count) +
                          "; the checkpoint was written for a different shape (model size, world size?)");
    }
  } else if (space_class == H5S_NULL) {
    count = 0;
  }

  if (H5Aexists(dset.get(), kAttrChecksum) <= 0) {
    throw_bad_entry(s, name,
                    std::string("has no '") + kAttrChecksum + "' checksum attribute; it was not written by antdt");
  }
  std::uint64_t stored_checksum = 0;
  {
    H5Handle attr = detail::h5_attribute(H5Aopen(dset.get(), kAttrChecksum, H5P_DEFAULT));
    H5Handle attr_type = detail::h5_type(attr.valid() ? H5Aget_type(attr.get()) : H5I_INVALID_HID);
    if (!attr.valid() || !attr_type.valid() || H5Tget_class(attr_type.get()) != H5T_INTEGER ||
        H5Tget_size(attr_type.get()) != 8 || H5Aread(attr.get(), H5T_NATIVE_UINT64, &stored_checksum) < 0) {
      throw_bad_entry(s, name, std::string("has an unreadable '") + kAttrChecksum + "' checksum attribute");
    }
  }

  const std::size_t mem_elem_size = kind == Kind::string ? elem_size : spec.size;
  // A damaged dataspace must not turn into a huge allocation: the data cannot be larger
  // than the file (no compression is used).
  hsize_t file_size = 0;
  if (H5Fget_filesize(s.file.get(), &file_size) < 0 ||
      static_cast<std::uint64_t>(count) > file_size / std::max<std::size_t>(mem_elem_size, 1)) {
    throw_bad_entry(s, name,
                    "claims " + std::to_string(count) + " elements of " + std::to_string(mem_elem_size) +
                        " bytes, more than the whole file holds (" + std::to_string(file_size) +
                        " bytes); the file is damaged");
  }
  std::vector<std::byte> data(static_cast<std::size_t>(count) * mem_elem_size);
  if (!data.empty()) {
    const hid_t mem_type = kind == Kind::string ? type.get() : native_type(kind);
    if (H5Dread(dset.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()) < 0) {
      throw_bad_entry(s, name, "cannot be read: " + h5_error_message() + "; the file is damaged");
    }
  }
  const std::uint64_t actual_checksum = checkpoint::fnv1a64(data);
  if (actual_checksum != stored_checksum) {
    char text[96];
    std::snprintf(text, sizeof text, "stored %016llx, computed %016llx",
                  static_cast<unsigned long long>(stored_checksum), static_cast<unsigned long long>(actual_checksum));
    throw_bad_entry(s, name,
                    std::string("fails its checksum (") + text + "): the data is corrupt; restore an older checkpoint");
  }
  return data;
}

template <class T>
std::vector<T> bytes_to(const std::vector<std::byte>& data) {
  std::vector<T> values(data.size() / sizeof(T));
  if (!data.empty()) std::memcpy(values.data(), data.data(), values.size() * sizeof(T));
  return values;
}

// Kind of a data set from its stored type and shape; nullopt if antdt never writes it.
std::optional<Kind> kind_of(hid_t dset) {
  H5Handle type = detail::h5_type(H5Dget_type(dset));
  H5Handle space = detail::h5_dataspace(H5Dget_space(dset));
  if (!type.valid() || !space.valid()) return std::nullopt;
  for (Kind k :
       {Kind::floats, Kind::doubles, Kind::int64s, Kind::uint64s, Kind::bytes, Kind::int64, Kind::real, Kind::string}) {
    const KindSpec spec = spec_of(k);
    if (H5Tget_class(type.get()) != spec.type_class) continue;
    if (spec.size != 0 && H5Tget_size(type.get()) != spec.size) continue;
    if (spec.type_class == H5T_INTEGER && H5Tget_sign(type.get()) != spec.sign) continue;
    const H5S_class_t space_class = H5Sget_simple_extent_type(space.get());
    if (spec.array != (space_class == H5S_SIMPLE)) continue;
    return k;
  }
  return std::nullopt;
}

void collect_names(const detail::CheckpointReaderState& s, hid_t group, const std::string& prefix,
                   std::vector<std::string>& out) {
  H5G_info_t info{};
  if (H5Gget_info(group, &info) < 0) {
    throw_bad_file(s.path,
                   "cannot list group '" + (prefix.empty() ? std::string("/") : prefix) + "': " + h5_error_message());
  }
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t length = H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (length < 0) throw_bad_file(s.path, "cannot list group '" + prefix + "': " + h5_error_message());
    std::string link(static_cast<std::size_t>(length) + 1, '\0');
    H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, link.data(), link.size(), H5P_DEFAULT);
    link.resize(static_cast<std::size_t>(length));
    const std::string full = prefix.empty() ? link : prefix + "/" + link;
    H5Handle object = h5_object(H5Oopen(group, link.c_str(), H5P_DEFAULT));
    if (!object.valid()) throw_bad_file(s.path, "cannot open '" + full + "': " + h5_error_message());
    if (H5Iget_type(object.get()) == H5I_GROUP) {
      collect_names(s, object.get(), full, out);
    } else if (H5Iget_type(object.get()) == H5I_DATASET) {
      out.push_back(full);
    }
  }
}

const detail::CheckpointReaderState& readable(const std::unique_ptr<detail::CheckpointReaderState>& state) {
  if (!state) throw UsageError("CheckpointReader used after it was moved from");
  return *state;
}

}  // namespace

CheckpointReader::CheckpointReader(const std::string& path)
    : state_(std::make_unique<detail::CheckpointReaderState>()) {
  H5QuietErrors quiet;
  auto& s = *state_;
  s.path = path;
  std::error_code ec;
  if (!fs::exists(path, ec)) throw_bad_file(path, "does not exist");
  if (!fs::is_regular_file(path, ec)) throw_bad_file(path, "is not a regular file");
  // The raw bytes first: HDF5 may corrupt memory when it parses a damaged file, so a file whose
  // bytes are not the ones written never reaches it.
  const checkpoint::FileCheck check = checkpoint::check_file(path);
  if (check.result == checkpoint::FileCheck::Result::damaged) {
    throw_bad_file(path, check.why + "; restore an older checkpoint");
  }
  s.file_checksum = check.result == checkpoint::FileCheck::Result::intact;
#if H5_VERSION_GE(1, 12, 0)
  const htri_t is_hdf5 = H5Fis_accessible(path.c_str(), H5P_DEFAULT);
#else
  const htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
#endif
  if (is_hdf5 == 0) throw_bad_file(path, "is not an HDF5 file (no HDF5 signature); it is not an antdt checkpoint");
  if (is_hdf5 < 0) throw_bad_file(path, "cannot be read: " + h5_error_message());
  H5Handle fapl = make_fapl(false);
  s.file = detail::h5_file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()));
  if (!s.file.valid()) {
    // Typical causes: "truncated file: eof = ..." (a crash or a full disk cut it short) and
    // "incorrect metadata checksum" (corrupted metadata).
    throw_bad_file(path, "cannot be opened by HDF5 (" + h5_error_message() +
                             "); it is damaged or truncated, restore an older checkpoint");
  }
  const auto format_version = root_int64_attribute(path, s.file.get(), kAttrFormatVersion);
  if (!format_version) {
    throw_bad_file(path, std::string("has no '") + kAttrFormatVersion + "' attribute; it is not an antdt checkpoint");
  }
  s.format_version = *format_version;
  if (s.format_version != kCheckpointFormatVersion) {
    std::string writer_version = "unknown";
    try {
      writer_version = root_string_attribute(path, s.file.get(), kAttrVersion);
    } catch (const CheckpointError&) {
    }
    throw_bad_file(path, "has checkpoint format version " + std::to_string(s.format_version) + " but antdt " +
                             ANTDT_VERSION_STRING + " reads only version " + std::to_string(kCheckpointFormatVersion) +
                             "; restore it with antdt " + writer_version + ", which wrote it");
  }
  const auto complete = root_int64_attribute(path, s.file.get(), kAttrComplete);
  if (!complete || *complete != 1) {
    throw_bad_file(path, std::string("has no completeness marker ('") + kAttrComplete +
                             "'); its write never finished, restore an older checkpoint");
  }
  const auto step = root_int64_attribute(path, s.file.get(), kAttrStep);
  if (!step) throw_bad_file(path, std::string("has no '") + kAttrStep + "' attribute");
  s.step = *step;
  s.antdt_version = root_string_attribute(path, s.file.get(), kAttrVersion);
}

CheckpointReader::CheckpointReader(CheckpointReader&&) noexcept = default;
CheckpointReader& CheckpointReader::operator=(CheckpointReader&&) noexcept = default;
CheckpointReader::~CheckpointReader() = default;

std::int64_t CheckpointReader::step() const { return readable(state_).step; }
std::string CheckpointReader::antdt_version() const { return readable(state_).antdt_version; }
std::int64_t CheckpointReader::format_version() const { return readable(state_).format_version; }
bool CheckpointReader::has_file_checksum() const { return readable(state_).file_checksum; }
const std::string& CheckpointReader::path() const { return readable(state_).path; }

bool CheckpointReader::has(const std::string& name) const {
  const auto& s = readable(state_);
  H5QuietErrors quiet;
  return open_entry(s, name, true).valid();
}

std::vector<std::string> CheckpointReader::names() const {
  const auto& s = readable(state_);
  H5QuietErrors quiet;
  std::vector<std::string> out;
  H5Handle root = detail::h5_group(H5Gopen2(s.file.get(), "/", H5P_DEFAULT));
  if (!root.valid()) throw_bad_file(s.path, "cannot open the root group: " + h5_error_message());
  collect_names(s, root.get(), "", out);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<float> CheckpointReader::floats(const std::string& name, std::int64_t expected_count) const {
  const auto& s = readable(state_);
  H5QuietErrors quiet;
  return bytes_to<float>(read_entry(s, name, Kind::floats, expected_count));
}

std::vector<double> CheckpointReader::doubles(const std::string& name, std::int64_t expected_count) const {
  const auto& s = readable(state_);
  H5QuietErrors quiet;
  return bytes_to<double>(read_entry(s, name, Kind::doubles, expected_count));
}

std::vector<std::int64_t> CheckpointReader::int64s(const std::string& name, std::int64_t expected_count) const {
  const auto& s = readable(state_);
  H5QuietErrors quiet;
  return bytes_to<std::int64_t>(read_entry(s, name, Kind::int64s, expected_count));
}

std::vector<std::uint64_t> CheckpointReader::uint64s(const std::string& name, std::int64_t expected_count) const {
  const auto& s = readable(state_);
  H5QuietErrors quiet;
  return bytes_to<std::uint64_t>(read_entry(s, name, Kind::uint64s, expected_count));
}

std::vector<std::byte> CheckpointReader::bytes(const std::string& name) const {
  const auto& s = readable(state_);
  H5QuietErrors quiet;
  return read_entry(s, name, Kind::bytes, -1);
}

std::int64_t CheckpointReader::int64(const std::string& name) const {
  const auto& s = readable(state_);
  H5QuietErrors quiet;
  return bytes_to<std::int64_t>(read_entry(s, name, Kind::int64, -1)).at(0);
}

double CheckpointReader::real(const std::string& name) const {
  const auto& s = readable(state_);
  H5QuietErrors quiet;
  return bytes_to<double>(read_entry(s, name, Kind::real, -1)).at(0);
}

std::string CheckpointReader::string(const std::string& name) const {
  const auto& s = readable(state_);
  H5QuietErrors quiet;
  const std::vector<std::byte> data = read_entry(s, name, Kind::string, -1);
  return {reinterpret_cast<const char*>(data.data()), data.size()};
}

void CheckpointReader::verify() const {
  const auto& s = readable(state_);
  for (const std::string& name : names()) {
    H5QuietErrors quiet;
    H5Handle dset = open_entry(s, name, false);
    const auto kind = kind_of(dset.get());
    if (!kind) throw_bad_entry(s, name, "has a type antdt never writes; the file was modified by another tool");
    dset.reset();
    (void)read_entry(s, name, *kind, -1);
  }
}

// =======================================================================================
// Directory queries
// =======================================================================================

std::vector<std::string> list_checkpoints(const std::string& directory) {
  std::vector<std::string> paths;
  for (const auto& [step, path] : scan_directory(directory).committed) paths.push_back(path.string());
  return paths;
}

void remove_checkpoints(const std::string& directory) {
  const Listing listing = scan_directory(directory);
  std::vector<fs::path> all = listing.temporaries;
  for (const auto& [step, path] : listing.committed) all.push_back(path);
  for (const fs::path& path : all) {
    std::error_code ec;
    fs::remove(path, ec);
    if (ec) throw WriteError("cannot delete checkpoint '" + path.string() + "': " + ec.message());
  }
  if (!all.empty()) fsync_path(directory, true);
}

bool is_checkpoint_store_name(const std::string& file_name) {
  return parse_final_name(file_name).has_value() || is_tmp_name(file_name) ||
         file_name == detail::kCheckpointLockFile || file_name == detail::kRunIdentityFile ||
         file_name == detail::kRunIdentityTmpFile;
}

std::optional<std::string> find_latest_checkpoint(const std::string& directory) {
  const Listing listing = scan_directory(directory);
  for (const fs::path& tmp : listing.temporaries) {
    ANTDT_LOG(warn) << "ignoring temporary checkpoint '" << tmp.string()
                    << "': its write never committed (the job stopped while writing it)";
  }
  for (auto it = listing.committed.rbegin(); it != listing.committed.rend(); ++it) {
    const auto& [step, path] = *it;
    try {
      CheckpointReader reader(path.string());
      if (reader.step() != step) {
        throw CheckpointError("checkpoint '" + path.string() + "' records step " + std::to_string(reader.step()) +
                              " but its name says step " + std::to_string(step));
      }
      reader.verify();
      if (!reader.has_file_checksum()) {
        ANTDT_LOG(warn) << "checkpoint '" << path.string()
                        << "' was written by an antdt that stored no file checksum: it is read as before, by HDF5 "
                           "alone (which a damaged file can crash); the checkpoints this run writes carry one";
      }
      return path.string();
    } catch (const Error& e) {
      ANTDT_LOG(warn) << "skipping invalid checkpoint, falling back to an older one: " << e.what();
    }
  }
  return std::nullopt;
}

}  // namespace antdt
