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
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <new>
#include <string>
#include <system_error>
#include <utility>

#include "antdt/data.hpp"
#include "antdt/error.hpp"
#include "core/h5.hpp"

namespace antdt::data {

namespace {

using detail::H5Handle;

constexpr std::int64_t kMaxGapRows = 32;     // read through gaps up to this many rows
constexpr std::int64_t kMinMeanRunRows = 4;  // below this mean run length, gather instead

std::string describe_type(hid_t type) {
  const H5T_class_t cls = H5Tget_class(type);
  const std::size_t bits = H5Tget_size(type) * 8;
  switch (cls) {
    case H5T_INTEGER:
      return std::string(H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(bits);
    case H5T_FLOAT:
      return "float" + std::to_string(bits);
    case H5T_STRING:
      return "string";
    case H5T_COMPOUND:
      return "compound";
    case H5T_ARRAY:
      return "array";
    case H5T_ENUM:
      return "enum";
    default:
      return "a non-numeric type";
  }
}

bool is_float32(hid_t type) { return H5Tget_class(type) == H5T_FLOAT && H5Tget_size(type) == 4; }
bool is_int32(hid_t type) {
  return H5Tget_class(type) == H5T_INTEGER && H5Tget_size(type) == 4 && H5Tget_sign(type) == H5T_SGN_2;
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
    throw fail(names_.features, "must be 2-D float32 (N x D) but is " + std::to_string(feature_rank) + "-D " +
                                    describe_type(feature_type.get()));
  }
  if (label_rank != 1 || !is_int32(label_type.get())) {
    throw fail(names_.labels,
               "must be 1-D int32 (N) but is " + std::to_string(label_rank) + "-D " + describe_type(label_type.get()));
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
  detail::H5QuietErrors quiet;
  const std::string tmp = path + ".tmp";
  auto fail = [&](const std::string& what) { return FileError("data file '" + path + "': cannot write: " + what); };
  auto write = [&] {
    H5Handle file = detail::h5_file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    if (!file.valid()) throw fail("cannot create '" + tmp + "' (is the directory writable?)");
    const hsize_t feature_dims[2] = {static_cast<hsize_t>(data.size()), static_cast<hsize_t>(data.dim())};
    const hsize_t label_dims[1] = {static_cast<hsize_t>(data.size())};
    H5Handle feature_space = detail::h5_dataspace(H5Screate_simple(2, feature_dims, nullptr));
    H5Handle label_space = detail::h5_dataspace(H5Screate_simple(1, label_dims, nullptr));
    H5Handle features = detail::h5_dataset(H5Dcreate2(file.get(), names.features.c_str(), H5T_IEEE_F32LE,
                                                      feature_space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    H5Handle labels = detail::h5_dataset(H5Dcreate2(file.get(), names.labels.c_str(), H5T_STD_I32LE, label_space.get(),
                                                    H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    if (!features.valid() || !labels.valid()) throw fail("cannot create the data sets");
    if (H5Dwrite(features.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.features().data()) < 0 ||
        H5Dwrite(labels.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.labels().data()) < 0) {
      throw fail("writing the data sets failed (disk full?)");
    }
    H5Handle scalar = detail::h5_dataspace(H5Screate(H5S_SCALAR));
    H5Handle attr = detail::h5_attribute(
        H5Acreate2(labels.get(), "num_classes", H5T_STD_I32LE, scalar.get(), H5P_DEFAULT, H5P_DEFAULT));
    const std::int32_t classes = data.num_classes();
    if (!attr.valid() || H5Awrite(attr.get(), H5T_NATIVE_INT32, &classes) < 0) throw fail("cannot write num_classes");
    // Closing (destructors, reverse order) flushes; H5Fflush makes a failure visible here.
    if (H5Fflush(file.get(), H5F_SCOPE_GLOBAL) < 0) throw fail("flush failed (disk full?)");
  };
  std::error_code ec;
  try {
    write();
  } catch (...) {
    std::filesystem::remove(tmp, ec);  // never leave a half-written temporary behind
    throw;
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw fail("cannot rename '" + tmp + "' into place: " + ec.message());
}

}  // namespace antdt::data
