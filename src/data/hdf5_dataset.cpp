// HDF5 reader and writer.
//
// Reading: the DDS hands out indices as runs of consecutive values (one per shard piece, or
// two when a piece wraps a step), so read() splits the request into maximal ascending runs
// and issues one hyperslab read per run straight into the caller's buffer. When the runs
// are short (shuffle_within_shard scatters a step over its shard), that would be one read
// per row; instead the request is sorted, cut into file ranges whose gaps are at most
// kMaxGapRows rows, each range is read once into a staging buffer, and rows are copied out
// in request order. Labels are small (4 bytes a sample): they are read and validated once at
// open and served from memory.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <new>
#include <string>
#include <system_error>
#include <utility>

#include "antdt/data.hpp"
#include "antdt/error.hpp"
#include "checkpoint/h5.hpp"

namespace antdt::data {

namespace {

using detail::H5Handle;

constexpr std::int64_t kMaxGapRows = 32;     // read through gaps up to this many rows
constexpr std::int64_t kMinMeanRunRows = 4;  // below this mean run length, gather instead

// A data set's type in words, for messages: "float64", "uint8", "int64 (big-endian)",
// "a variable-length string", "a compound of 2 members (a: float32, b: int32)". A type whose
// stored description cannot be real (an integer of 0 bytes or of more bits than bytes hold, a
// size past any numeric type) is "a damaged <class> type (...)", never "int0".
std::string describe_type(hid_t type, int depth = 0) {
  const H5T_class_t cls = type < 0 ? H5T_NO_CLASS : H5Tget_class(type);
  const std::size_t bytes = type < 0 ? 0 : H5Tget_size(type);
  const std::string size_text = std::to_string(bytes) + (bytes == 1 ? " byte" : " bytes");
  auto order_note = [&] { return H5Tget_order(type) == H5T_ORDER_BE ? std::string(" (big-endian)") : std::string(); };
  switch (cls) {
    case H5T_INTEGER:
    case H5T_FLOAT: {
      const bool integer = cls == H5T_INTEGER;
      const std::string kind = integer ? "integer" : "floating-point";
      const std::size_t precision = H5Tget_precision(type);
      if (bytes == 0 || bytes > 16 || precision == 0 || precision > bytes * 8) {
        return "a damaged " + kind + " type (" + size_text + " for " + std::to_string(precision) +
               " bits of precision)";
      }
      const bool plain = (bytes == 1 || bytes == 2 || bytes == 4 || bytes == 8) && precision == bytes * 8 &&
                         H5Tget_offset(type) == 0 && (integer || bytes >= 2);
      if (!plain) return "a " + std::to_string(precision) + "-bit " + kind + " type in " + size_text + order_note();
      if (integer) {
        return std::string(H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(bytes * 8) +
               order_note();
      }
      return "float" + std::to_string(bytes * 8) + order_note();
    }
    case H5T_STRING: {
      const htri_t variable = H5Tis_variable_str(type);
      return variable > 0 ? "a variable-length string type" : "a fixed-length string type of " + size_text;
    }
    case H5T_COMPOUND: {
      const int members = H5Tget_nmembers(type);
      std::string out = "a compound type of " + std::to_string(members) + (members == 1 ? " member" : " members");
      if (depth > 0 || members < 1) return out;
      out += " (";
      for (int m = 0; m < std::min(members, 4); ++m) {
        char* name = H5Tget_member_name(type, static_cast<unsigned>(m));
        H5Handle member = detail::h5_type(H5Tget_member_type(type, static_cast<unsigned>(m)));
        out += (m > 0 ? ", " : "") + std::string(name != nullptr ? name : "?") + ": " +
               describe_type(member.get(), depth + 1);
        if (name != nullptr) H5free_memory(name);
      }
      return out + (members > 4 ? ", ...)" : ")");
    }
    case H5T_ARRAY: {
      const int rank = H5Tget_array_ndims(type);
      H5Handle base = detail::h5_type(H5Tget_super(type));
      std::string dims;
      if (rank > 0 && rank <= 32) {
        std::vector<hsize_t> extent(static_cast<std::size_t>(rank));
        H5Tget_array_dims2(type, extent.data());
        for (const hsize_t e : extent) dims += (dims.empty() ? "" : " x ") + std::to_string(e);
      }
      return "an array type (" + dims + " of " + describe_type(base.get(), depth + 1) + " in each element)";
    }
    case H5T_ENUM: {
      H5Handle base = detail::h5_type(H5Tget_super(type));
      return "an enum type over " + describe_type(base.get(), depth + 1) + " (h5py stores bool as one)";
    }
    case H5T_VLEN: {
      H5Handle base = detail::h5_type(H5Tget_super(type));
      return "a variable-length sequence type of " + describe_type(base.get(), depth + 1);
    }
    case H5T_BITFIELD:
      return "a bitfield type of " + size_text;
    case H5T_OPAQUE:
      return "an opaque type of " + size_text;
    case H5T_REFERENCE:
      return "a reference type";
    case H5T_TIME:
      return "a time type";
    default:
      return "a type HDF5 cannot read (the file may be damaged)";
  }
}

// "2-D float64", "1-D of a variable-length string type".
std::string shape_and_type(int rank, hid_t type) {
  const std::string what = describe_type(type);
  const bool phrase = what.rfind("a ", 0) == 0 || what.rfind("an ", 0) == 0;
  return std::to_string(rank) + "-D" + (phrase ? " of " : " ") + what;
}

bool is_float32(hid_t type) { return H5Tget_class(type) == H5T_FLOAT && H5Tget_size(type) == 4; }
bool is_int32(hid_t type) {
  return H5Tget_class(type) == H5T_INTEGER && H5Tget_size(type) == 4 && H5Tget_sign(type) == H5T_SGN_2;
}

constexpr const char* kSampleShape = "sample_shape";

// An HDF5 file opened for writing: closed once, and the close is checked by the writer.
struct OwnedFile {
  hid_t id = H5I_INVALID_HID;
  OwnedFile() = default;
  OwnedFile(const OwnedFile&) = delete;
  OwnedFile& operator=(const OwnedFile&) = delete;
  ~OwnedFile() { (void)close(); }
  [[nodiscard]] bool open() const noexcept { return id >= 0; }
  bool close() noexcept {
    if (id < 0) return true;
    const herr_t rc = H5Fclose(std::exchange(id, H5I_INVALID_HID));
    return rc >= 0;
  }
};
constexpr int kMaxShapeRank = 8;

// The features' "sample_shape" attribute (empty without one): a 1-D list of 1 to 8 integers,
// each >= 1, whose product is dim. `fail(what)` makes the error.
template <class Fail>
std::vector<std::int64_t> read_sample_shape(hid_t features, std::int64_t dim, const Fail& fail) {
  if (H5Aexists(features, kSampleShape) <= 0) return {};
  H5Handle attr = detail::h5_attribute(H5Aopen(features, kSampleShape, H5P_DEFAULT));
  H5Handle space = detail::h5_dataspace(attr.valid() ? H5Aget_space(attr.get()) : H5I_INVALID_HID);
  H5Handle type = detail::h5_type(attr.valid() ? H5Aget_type(attr.get()) : H5I_INVALID_HID);
  if (!attr.valid() || !space.valid() || !type.valid()) throw fail("cannot be read");
  const int rank = H5Sget_simple_extent_ndims(space.get());
  const hssize_t count = H5Sget_simple_extent_npoints(space.get());
  if (H5Tget_class(type.get()) != H5T_INTEGER || rank != 1 || count < 1 || count > kMaxShapeRank) {
    throw fail("must be a 1-D list of 1 to " + std::to_string(kMaxShapeRank) +
               " integers ([C, H, W] for images) but is " + shape_and_type(rank, type.get()) + " with " +
               std::to_string(count) + " values");
  }
  std::vector<std::int64_t> shape(static_cast<std::size_t>(count));
  if (H5Aread(attr.get(), H5T_NATIVE_INT64, shape.data()) < 0) throw fail("cannot be read as int64");
  std::string text;
  for (const std::int64_t e : shape) text += (text.empty() ? "" : ", ") + std::to_string(e);
  std::int64_t product = 1;
  for (const std::int64_t e : shape) {
    if (e < 1) throw fail("is [" + text + "]; every extent must be >= 1");
    product = product > dim / e ? dim + 1 : product * e;  // saturates above dim
  }
  if (product != dim) {
    throw fail("is [" + text + "], which is not " + std::to_string(dim) +
               " features per sample (D); the product must be D");
  }
  return shape;
}

}  // namespace

struct Hdf5Dataset::Handles {
  H5Handle fapl;
  H5Handle file;
  H5Handle features;
  H5Handle file_space;
};

Hdf5Dataset::Hdf5Dataset(const std::string& path, Hdf5Names names, ReadMode mode, MPI_Comm comm)
    : path_(path), names_(std::move(names)), mode_(mode), h_(std::make_unique<Handles>()) {
  detail::H5QuietErrors quiet;
  auto fail = [&](const std::string& set, const std::string& what) -> FileError {
    return FileError("data file '" + path_ + "'" + (set.empty() ? "" : ", data set '" + set + "'") + ": " + what);
  };
  std::error_code ec;
  if (!std::filesystem::exists(path_, ec)) throw fail("", "no such file; create it with antdt-datagen or write_hdf5");
  if (!std::filesystem::is_regular_file(path_, ec)) throw fail("", "not a regular file");
  if (H5Fis_hdf5(path_.c_str()) <= 0) throw fail("", "not an HDF5 file (or unreadable)");

  h_->fapl = detail::h5_plist(H5Pcreate(H5P_FILE_ACCESS));
  if (!h_->fapl.valid()) throw fail("", "cannot create a file access property list");
  if (mode_ == ReadMode::collective) {
    if (H5Pset_fapl_mpio(h_->fapl.get(), comm, MPI_INFO_NULL) < 0) throw fail("", "cannot select the MPI-IO driver");
  }
  h_->file = detail::h5_file(H5Fopen(path_.c_str(), H5F_ACC_RDONLY, h_->fapl.get()));
  if (!h_->file.valid()) {
    // A file cut short (a copy or a write that stopped, a full disk) fails here with HDF5's
    // "truncated file: eof = ..."; say so in words, with HDF5's own reason.
    const std::string why = detail::h5_error_message();
    throw fail("", (why.find("truncated") != std::string::npos
                        ? "is truncated (shorter than HDF5 recorded: " + why + "); copy or write it again"
                        : "cannot be opened read-only: " + why + "; it may be damaged or truncated"));
  }

  auto open_set = [&](const std::string& set) {
    if (H5Lexists(h_->file.get(), set.c_str(), H5P_DEFAULT) <= 0) {
      throw fail(set, "no such data set; expected '" + names_.features + "' (N x D float32) and '" + names_.labels +
                          "' (N int32)");
    }
    H5Handle d = detail::h5_dataset(H5Dopen2(h_->file.get(), set.c_str(), H5P_DEFAULT));
    if (!d.valid()) throw fail(set, "exists but is not a data set");
    return d;
  };
  h_->features = open_set(names_.features);
  H5Handle labels = open_set(names_.labels);

  // Shapes and types.
  h_->file_space = detail::h5_dataspace(H5Dget_space(h_->features.get()));
  H5Handle label_space = detail::h5_dataspace(H5Dget_space(labels.get()));
  if (!h_->file_space.valid() || !label_space.valid()) throw fail(names_.features, "cannot read the data space");
  const int feature_rank = H5Sget_simple_extent_ndims(h_->file_space.get());
  const int label_rank = H5Sget_simple_extent_ndims(label_space.get());
  H5Handle feature_type = detail::h5_type(H5Dget_type(h_->features.get()));
  H5Handle label_type = detail::h5_type(H5Dget_type(labels.get()));
  if (feature_rank != 2 || !is_float32(feature_type.get())) {
    throw fail(names_.features,
               "must be 2-D float32 (N x D) but is " + shape_and_type(feature_rank, feature_type.get()));
  }
  if (label_rank != 1 || !is_int32(label_type.get())) {
    throw fail(names_.labels, "must be 1-D int32 (N) but is " + shape_and_type(label_rank, label_type.get()));
  }
  hsize_t feature_dims[2] = {0, 0};
  hsize_t label_dims[1] = {0};
  H5Sget_simple_extent_dims(h_->file_space.get(), feature_dims, nullptr);
  H5Sget_simple_extent_dims(label_space.get(), label_dims, nullptr);
  if (feature_dims[0] != label_dims[0]) {
    throw fail(names_.labels, "has " + std::to_string(label_dims[0]) + " labels but '" + names_.features + "' has " +
                                  std::to_string(feature_dims[0]) + " samples; the counts must match");
  }
  if (feature_dims[0] == 0) throw fail(names_.features, "is empty (N = 0); a data set needs at least one sample");
  if (feature_dims[1] == 0) throw fail(names_.features, "has D = 0 features per sample");
  // A data set's header can claim any extent. For the contiguous layout (antdt-datagen's,
  // h5py's default) and the compact one the bytes stored must be the bytes claimed: so a
  // damaged header is an error here, before anything is sized by it or read through it.
  auto check_storage = [&](const H5Handle& set, const std::string& name, hsize_t elements) {
    H5Handle dcpl = detail::h5_plist(H5Dget_create_plist(set.get()));
    if (!dcpl.valid()) throw fail(name, "cannot read its storage layout");
    const H5D_layout_t layout = H5Pget_layout(dcpl.get());
    if (layout != H5D_CONTIGUOUS && layout != H5D_COMPACT) return;  // chunked: maybe compressed
    const hsize_t stored = H5Dget_storage_size(set.get());
    if (elements > std::numeric_limits<hsize_t>::max() / 4 || stored != elements * 4) {
      throw fail(name, "claims " + std::to_string(elements) + " values but stores " + std::to_string(stored) +
                           " bytes; the file is damaged or truncated");
    }
  };
  check_storage(h_->features, names_.features, feature_dims[0] * feature_dims[1]);
  check_storage(labels, names_.labels, label_dims[0]);
  if (feature_dims[1] > static_cast<hsize_t>(std::numeric_limits<std::int32_t>::max()) ||
      feature_dims[0] > static_cast<hsize_t>(std::numeric_limits<std::int64_t>::max() / 8)) {
    throw fail(names_.features,
               "has an implausible shape " + std::to_string(feature_dims[0]) + " x " + std::to_string(feature_dims[1]));
  }
  size_ = static_cast<std::int64_t>(feature_dims[0]);
  dim_ = static_cast<std::int64_t>(feature_dims[1]);
  sample_shape_ = read_sample_shape(h_->features.get(), dim_, [&](const std::string& what) {
    return fail(names_.features, "attribute 'sample_shape' " + what);
  });

  try {
    labels_.resize(static_cast<std::size_t>(size_));
  } catch (const std::bad_alloc&) {
    throw fail(names_.labels, "its " + std::to_string(size_) + " labels do not fit in memory");
  }
  if (H5Dread(labels.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels_.data()) < 0) {
    throw fail(names_.labels, "cannot be read");
  }
  // num_classes: the attribute if present, else max label + 1.
  const htri_t has_attr = H5Aexists(labels.get(), "num_classes");
  if (has_attr > 0) {
    H5Handle attr = detail::h5_attribute(H5Aopen(labels.get(), "num_classes", H5P_DEFAULT));
    H5Handle attr_space = detail::h5_dataspace(attr.valid() ? H5Aget_space(attr.get()) : H5I_INVALID_HID);
    std::int32_t classes = 0;
    if (!attr.valid() || !attr_space.valid() || H5Sget_simple_extent_npoints(attr_space.get()) != 1 ||
        H5Aread(attr.get(), H5T_NATIVE_INT32, &classes) < 0) {
      throw fail(names_.labels, "attribute 'num_classes' must be one integer");
    }
    if (classes < 1)
      throw fail(names_.labels, "attribute 'num_classes' is " + std::to_string(classes) + "; it must be >= 1");
    num_classes_ = classes;
  } else {
    // max + 1 in 64 bits: a label of INT32_MAX (a damaged file, found by fuzzing) leaves no
    // int32 class count above it.
    const std::int64_t classes = 1 + static_cast<std::int64_t>(*std::max_element(labels_.begin(), labels_.end()));
    if (classes > std::numeric_limits<std::int32_t>::max()) {
      throw fail(names_.labels, "has a label of " + std::to_string(classes - 1) +
                                    ", so no int32 class count covers it; the labels are damaged");
    }
    num_classes_ = std::max<std::int32_t>(1, static_cast<std::int32_t>(classes));
  }
  for (std::size_t i = 0; i < labels_.size(); ++i) {
    if (labels_[i] < 0 || labels_[i] >= num_classes_) {
      throw fail(names_.labels, "label " + std::to_string(labels_[i]) + " of sample " + std::to_string(i) +
                                    " is outside [0, num_classes = " + std::to_string(num_classes_) + ")");
    }
  }
}

Hdf5Dataset::~Hdf5Dataset() = default;

void Hdf5Dataset::read(std::span<const std::int64_t> indices, float* features, std::int32_t* labels) {
  for (const std::int64_t index : indices) {
    if (index < 0 || index >= size_) {
      throw UsageError("data file '" + path_ + "': sample index " + std::to_string(index) + " outside [0, " +
                       std::to_string(size_) + ")");
    }
  }
  for (std::size_t i = 0; i < indices.size(); ++i) labels[i] = labels_[static_cast<std::size_t>(indices[i])];
  if (indices.empty()) return;

  detail::H5QuietErrors quiet;
  const auto row = static_cast<std::size_t>(dim_);
  // Reads rows [first, first + count) of the features into dst.
  auto read_rows = [&](std::int64_t first, std::int64_t count, float* dst) {
    const hsize_t start[2] = {static_cast<hsize_t>(first), 0};
    const hsize_t extent[2] = {static_cast<hsize_t>(count), static_cast<hsize_t>(dim_)};
    H5Handle memory = detail::h5_dataspace(H5Screate_simple(2, extent, nullptr));
    if (!memory.valid() ||
        H5Sselect_hyperslab(h_->file_space.get(), H5S_SELECT_SET, start, nullptr, extent, nullptr) < 0 ||
        H5Dread(h_->features.get(), H5T_NATIVE_FLOAT, memory.get(), h_->file_space.get(), H5P_DEFAULT, dst) < 0) {
      throw FileError("data file '" + path_ + "', data set '" + names_.features + "': reading rows [" +
                      std::to_string(first) + ", " + std::to_string(first + count) + ") failed");
    }
    ++read_calls_;
  };

  std::size_t runs = 1;
  for (std::size_t i = 1; i < indices.size(); ++i) runs += indices[i] != indices[i - 1] + 1 ? 1 : 0;
  if (runs <= 2 || static_cast<std::int64_t>(indices.size()) >= kMinMeanRunRows * static_cast<std::int64_t>(runs)) {
    // Long runs: one hyperslab per run, straight into the caller's buffer.
    std::size_t begin = 0;
    for (std::size_t i = 1; i <= indices.size(); ++i) {
      if (i == indices.size() || indices[i] != indices[i - 1] + 1) {
        read_rows(indices[begin], static_cast<std::int64_t>(i - begin), features + begin * row);
        begin = i;
      }
    }
    return;
  }
  // Short runs: sort by file position, read each dense file range once, copy rows out.
  std::vector<std::pair<std::int64_t, std::size_t>> order(indices.size());
  for (std::size_t i = 0; i < indices.size(); ++i) order[i] = {indices[i], i};
  std::sort(order.begin(), order.end());
  std::size_t begin = 0;
  for (std::size_t i = 1; i <= order.size(); ++i) {
    if (i < order.size() && order[i].first - order[i - 1].first <= kMaxGapRows) continue;
    const std::int64_t first = order[begin].first;
    const std::int64_t count = order[i - 1].first - first + 1;
    staging_.resize(static_cast<std::size_t>(count) * row);
    read_rows(first, count, staging_.data());
    for (std::size_t j = begin; j < i; ++j) {
      std::memcpy(features + order[j].second * row,
                  staging_.data() + static_cast<std::size_t>(order[j].first - first) * row, row * sizeof(float));
    }
    begin = i;
  }
}

void write_hdf5(const std::string& path, const InMemoryDataset& data, Hdf5Names names) {
  namespace fs = std::filesystem;
  detail::H5QuietErrors quiet;
  auto fail = [&](const std::string& what) {
    return WriteError("data file '" + path + "': cannot write: " + what + "; nothing was written there");
  };
  // A symbolic link's target is the file replaced, so the link stays a link.
  std::error_code ec;
  fs::path target = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) target = fs::absolute(path).lexically_normal();
  const fs::path dir = target.parent_path();

  // A temporary beside the target, created exclusively: it never replaces a file of the user's.
  static std::atomic<std::uint64_t> counter{0};
  std::string tmp;
  OwnedFile file;
  for (int attempt = 0; attempt < 100 && !file.open(); ++attempt) {
    tmp = (dir / ("." + target.filename().string() + "." + std::to_string(::getpid()) + "-" +
                  std::to_string(counter++) + ".tmp"))
              .string();
    file.id = H5Fcreate(tmp.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT);
    if (!file.open() && !fs::exists(tmp, ec)) break;  // not a name clash: give up
  }
  if (!file.open()) {
    throw fail("cannot create a temporary file in '" + dir.string() + "': " + detail::h5_error_message());
  }
  auto write = [&] {
    const hsize_t feature_dims[2] = {static_cast<hsize_t>(data.size()), static_cast<hsize_t>(data.dim())};
    const hsize_t label_dims[1] = {static_cast<hsize_t>(data.size())};
    H5Handle feature_space = detail::h5_dataspace(H5Screate_simple(2, feature_dims, nullptr));
    H5Handle label_space = detail::h5_dataspace(H5Screate_simple(1, label_dims, nullptr));
    H5Handle features = detail::h5_dataset(H5Dcreate2(file.id, names.features.c_str(), H5T_IEEE_F32LE,
                                                      feature_space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    H5Handle labels = detail::h5_dataset(H5Dcreate2(file.id, names.labels.c_str(), H5T_STD_I32LE, label_space.get(),
                                                    H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    if (!features.valid() || !labels.valid()) throw fail("cannot create the data sets: " + detail::h5_error_message());
    if (H5Dwrite(features.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.features().data()) < 0 ||
        H5Dwrite(labels.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.labels().data()) < 0) {
      throw fail("writing the data sets failed: " + detail::h5_error_message());
    }
    H5Handle scalar = detail::h5_dataspace(H5Screate(H5S_SCALAR));
    H5Handle attr = detail::h5_attribute(
        H5Acreate2(labels.get(), "num_classes", H5T_STD_I32LE, scalar.get(), H5P_DEFAULT, H5P_DEFAULT));
    const std::int32_t classes = data.num_classes();
    if (!attr.valid() || H5Awrite(attr.get(), H5T_NATIVE_INT32, &classes) < 0) throw fail("cannot write num_classes");
    const std::vector<std::int64_t> shape = data.sample_shape();
    if (!shape.empty()) {
      const hsize_t extent[1] = {shape.size()};
      H5Handle shape_space = detail::h5_dataspace(H5Screate_simple(1, extent, nullptr));
      H5Handle shape_attr = detail::h5_attribute(
          H5Acreate2(features.get(), kSampleShape, H5T_STD_I64LE, shape_space.get(), H5P_DEFAULT, H5P_DEFAULT));
      if (!shape_attr.valid() || H5Awrite(shape_attr.get(), H5T_NATIVE_INT64, shape.data()) < 0) {
        throw fail("cannot write sample_shape");
      }
    }
  };
  try {
    write();
    if (H5Fflush(file.id, H5F_SCOPE_GLOBAL) < 0) throw fail("flush failed: " + detail::h5_error_message());
    if (!file.close()) throw fail("closing the file failed: " + detail::h5_error_message());
    // The bytes are on disk before the name points at them.
    const int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::fsync(fd) != 0) {
      const int err = errno;
      if (fd >= 0) ::close(fd);
      throw fail(std::string("fsync failed: ") + std::strerror(err));
    }
    ::close(fd);
    fs::rename(tmp, target, ec);
    if (ec) throw fail("cannot rename the temporary file into place: " + ec.message());
  } catch (...) {
    file.close();
    fs::remove(tmp, ec);  // never leave a half-written temporary behind
    throw;
  }
  // The rename is durable once the directory is synced; a failure here leaves a whole file.
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    (void)::fsync(dir_fd);
    ::close(dir_fd);
  }
}

}  // namespace antdt::data
