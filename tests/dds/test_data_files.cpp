// Data sets: the synthetic generator, the in-memory set, the HDF5 round trip with
// coalesced reads, and every bad-file case (one-line FileError naming file and data set,
// file left unchanged).
#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "antdt/data.hpp"
#include "antdt/error.hpp"
#include "data_test_files.hpp"

using namespace antdt::data;
namespace fs = std::filesystem;

namespace {

using antdt::test::slurp;
using antdt::test::TempDir;

// Writes an HDF5 file with the raw C API, for layouts write_hdf5 refuses to produce.
void make_file(const std::string& path, const std::function<void(hid_t)>& fill) {
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  fill(file);
  H5Fclose(file);
}

template <class T>
void add_set(hid_t file, const char* name, hid_t file_type, hid_t mem_type, std::vector<hsize_t> dims,
             const std::vector<T>& values) {
  const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t set = H5Dcreate2(file, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(set, 0);
  if (!values.empty()) {
    ASSERT_GE(H5Dwrite(set, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
  }
  H5Dclose(set);
  H5Sclose(space);
}

void add_num_classes(hid_t file, const char* set_name, std::int32_t classes) {
  const hid_t set = H5Dopen2(file, set_name, H5P_DEFAULT);
  const hid_t scalar = H5Screate(H5S_SCALAR);
  const hid_t attr = H5Acreate2(set, "num_classes", H5T_STD_I32LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(attr, H5T_NATIVE_INT32, &classes);
  H5Aclose(attr);
  H5Sclose(scalar);
  H5Dclose(set);
}

// A good layout (N x D float32 + N int32), with hooks to break one thing.
void good_sets(hid_t file, std::int64_t n = 6, std::int64_t d = 3) {
  add_set(file, "features", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {static_cast<hsize_t>(n), static_cast<hsize_t>(d)},
          std::vector<float>(static_cast<std::size_t>(n * d), 1.0f));
  add_set(file, "labels", H5T_STD_I32LE, H5T_NATIVE_INT32, {static_cast<hsize_t>(n)},
          std::vector<std::int32_t>(static_cast<std::size_t>(n), 1));
}

// Opening must throw a one-line FileError mentioning every fragment, and leave the file as it was.
void expect_file_error(const std::string& path, const std::vector<std::string>& fragments) {
  const bool existed = fs::exists(path);
  const std::string before = existed ? slurp(path) : "";
  const auto mtime = existed ? fs::last_write_time(path) : fs::file_time_type{};
  try {
    Hdf5Dataset data(path);
    ADD_FAILURE() << "opening " << path << " did not throw";
  } catch (const antdt::FileError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << "one line: " << what;
    EXPECT_NE(what.find(path), std::string::npos) << "names the file: " << what;
    for (const auto& f : fragments) EXPECT_NE(what.find(f), std::string::npos) << "mentions '" << f << "': " << what;
  }
  if (existed) {
    EXPECT_EQ(slurp(path), before) << "the file must not be modified";
    EXPECT_EQ(fs::last_write_time(path), mtime);
  } else {
    EXPECT_FALSE(fs::exists(path)) << "a missing file must not be created";
  }
}

}  // namespace

TEST(Synthetic, DeterministicPerSeedAndLearnable) {
  const SyntheticSpec spec{2000, 16, 4, 7, 1.0f};
  const auto a = make_synthetic(spec);
  const auto b = make_synthetic(spec);
  EXPECT_EQ(a.features(), b.features());
  EXPECT_EQ(a.labels(), b.labels());
  auto other = spec;
  other.seed = 8;
  EXPECT_NE(make_synthetic(other).features(), a.features());
  // Every class occurs, and a nearest-centroid classifier fitted on the data separates them.
  std::vector<std::int64_t> count;
  const auto correct = antdt::test::nearest_mean_correct(a, a, &count);
  for (const auto n : count) EXPECT_GT(n, 300);
  EXPECT_GT(correct, 1900) << "the synthetic task must be learnable";
  EXPECT_THROW((void)make_synthetic({0, 4, 2, 1}), antdt::UsageError);
  EXPECT_THROW((void)make_synthetic({10, 4, 2, 1, -1.0f}), antdt::UsageError);
}

TEST(InMemory, ValidatesAndReadsInRequestOrder) {
  EXPECT_THROW(InMemoryDataset({1, 2, 3}, {0, 1}, 2, 2), antdt::UsageError);
  EXPECT_THROW(InMemoryDataset({1, 2}, {2}, 2, 2), antdt::UsageError);
  InMemoryDataset data({0, 1, 10, 11, 20, 21}, {0, 1, 0}, 2, 2);
  const std::vector<std::int64_t> idx{2, 0, 2};
  std::vector<float> f(6);
  std::vector<std::int32_t> l(3);
  data.read(idx, f.data(), l.data());
  EXPECT_EQ(f, (std::vector<float>{20, 21, 0, 1, 20, 21}));
  EXPECT_EQ(l, (std::vector<std::int32_t>{0, 0, 0}));
  const std::vector<std::int64_t> bad{3};
  EXPECT_THROW(data.read(bad, f.data(), l.data()), antdt::UsageError);
}

TEST(Hdf5, RoundTripWithCoalescedRuns) {
  TempDir dir;
  const auto path = dir.file("data.h5");
  auto source = make_synthetic({1003, 5, 7, 3, 0.5f});
  write_hdf5(path, source);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  Hdf5Dataset data(path);
  EXPECT_EQ(data.size(), 1003);
  EXPECT_EQ(data.dim(), 5);
  EXPECT_EQ(data.num_classes(), 7);

  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 40; ++trial) {
    // A step's indices: a few runs of consecutive indices, like DDS pieces.
    std::vector<std::int64_t> idx;
    const int runs = 1 + static_cast<int>(rng() % 4);
    for (int r = 0; r < runs; ++r) {
      const auto len = static_cast<std::int64_t>(1 + rng() % 60);
      const auto start = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(1003 - len + 1));
      for (std::int64_t i = 0; i < len; ++i) idx.push_back(start + i);
    }
    if (trial % 4 == 3) std::shuffle(idx.begin(), idx.end(), rng);  // scattered: the gather path
    std::vector<float> got(idx.size() * 5), want(idx.size() * 5);
    std::vector<std::int32_t> got_l(idx.size()), want_l(idx.size());
    const auto calls_before = data.read_calls();
    data.read(idx, got.data(), got_l.data());
    source.read(idx, want.data(), want_l.data());
    ASSERT_EQ(got, want) << "trial " << trial;
    ASSERT_EQ(got_l, want_l);
    const auto calls = data.read_calls() - calls_before;
    if (trial % 4 != 3) {
      EXPECT_LE(calls, runs) << "one hyperslab read per run, never one per row";
    } else {
      EXPECT_LT(calls, static_cast<std::int64_t>(idx.size()) / 2 + 2) << "scattered rows are gathered through ranges";
    }
  }
  const std::vector<std::int64_t> out_of_range{1003};
  std::vector<float> f(5);
  std::int32_t l = 0;
  EXPECT_THROW(data.read(out_of_range, f.data(), &l), antdt::UsageError);
  data.read({}, nullptr, nullptr);
}

TEST(Hdf5, CustomNamesAndMissingNumClassesAttribute) {
  TempDir dir;
  const auto path = dir.file("named.h5");
  write_hdf5(path, make_synthetic({20, 2, 3, 1}), Hdf5Names{"x", "y"});
  Hdf5Dataset data(path, Hdf5Names{"x", "y"});
  EXPECT_EQ(data.size(), 20);
  EXPECT_EQ(data.num_classes(), 3);
  // Without the attribute, num_classes is max label + 1.
  const auto bare = dir.file("bare.h5");
  make_file(bare, [](hid_t f) {
    add_set(f, "features", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {3, 1}, std::vector<float>{1, 2, 3});
    add_set(f, "labels", H5T_STD_I32LE, H5T_NATIVE_INT32, {3}, std::vector<std::int32_t>{0, 4, 2});
  });
  EXPECT_EQ(Hdf5Dataset(bare).num_classes(), 5);
}

TEST(Hdf5, BadFilesGiveOneLineFileErrorsAndStayUnchanged) {
  TempDir dir;
  expect_file_error(dir.file("missing.h5"), {"no such file"});

  const auto text = dir.file("text.h5");
  std::ofstream(text) << "this is not HDF5\n";
  expect_file_error(text, {"not an HDF5 file"});

  const auto no_labels = dir.file("no_labels.h5");
  make_file(no_labels, [](hid_t f) {
    add_set(f, "features", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {4, 2}, std::vector<float>(8, 0.0f));
  });
  expect_file_error(no_labels, {"data set 'labels'", "no such data set"});

  const auto no_features = dir.file("no_features.h5");
  make_file(no_features, [](hid_t f) {
    add_set(f, "labels", H5T_STD_I32LE, H5T_NATIVE_INT32, {4}, std::vector<std::int32_t>(4, 0));
  });
  expect_file_error(no_features, {"data set 'features'", "no such data set"});

  const auto features_1d = dir.file("features_1d.h5");
  make_file(features_1d, [](hid_t f) {
    add_set(f, "features", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {4}, std::vector<float>(4, 0.0f));
    add_set(f, "labels", H5T_STD_I32LE, H5T_NATIVE_INT32, {4}, std::vector<std::int32_t>(4, 0));
  });
  expect_file_error(features_1d, {"data set 'features'", "2-D float32", "1-D float32"});

  const auto features_f64 = dir.file("features_f64.h5");
  make_file(features_f64, [](hid_t f) {
    add_set(f, "features", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {4, 2}, std::vector<double>(8, 0.0));
    add_set(f, "labels", H5T_STD_I32LE, H5T_NATIVE_INT32, {4}, std::vector<std::int32_t>(4, 0));
  });
  expect_file_error(features_f64, {"data set 'features'", "2-D float64"});

  const auto labels_i64 = dir.file("labels_i64.h5");
  make_file(labels_i64, [](hid_t f) {
    add_set(f, "features", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {4, 2}, std::vector<float>(8, 0.0f));
    add_set(f, "labels", H5T_STD_I64LE, H5T_NATIVE_INT64, {4}, std::vector<std::int64_t>(4, 0));
  });
  expect_file_error(labels_i64, {"data set 'labels'", "1-D int32", "1-D int64"});

  const auto labels_2d = dir.file("labels_2d.h5");
  make_file(labels_2d, [](hid_t f) {
    add_set(f, "features", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {4, 2}, std::vector<float>(8, 0.0f));
    add_set(f, "labels", H5T_STD_I32LE, H5T_NATIVE_INT32, {4, 1}, std::vector<std::int32_t>(4, 0));
  });
  expect_file_error(labels_2d, {"data set 'labels'", "2-D int32"});

  const auto counts = dir.file("counts.h5");
  make_file(counts, [](hid_t f) {
    add_set(f, "features", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {4, 2}, std::vector<float>(8, 0.0f));
    add_set(f, "labels", H5T_STD_I32LE, H5T_NATIVE_INT32, {5}, std::vector<std::int32_t>(5, 0));
  });
  expect_file_error(counts, {"data set 'labels'", "5 labels", "4 samples"});

  const auto empty = dir.file("empty.h5");
  make_file(empty, [](hid_t f) {
    add_set(f, "features", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {0, 2}, std::vector<float>{});
    add_set(f, "labels", H5T_STD_I32LE, H5T_NATIVE_INT32, {0}, std::vector<std::int32_t>{});
  });
  expect_file_error(empty, {"data set 'features'", "N = 0"});

  const auto label_range = dir.file("label_range.h5");
  make_file(label_range, [](hid_t f) {
    good_sets(f);
    add_num_classes(f, "labels", 1);  // labels are all 1: outside [0, 1)
  });
  expect_file_error(label_range, {"data set 'labels'", "label 1 of sample 0", "num_classes = 1"});

  const auto negative = dir.file("negative.h5");
  make_file(negative, [](hid_t f) {
    add_set(f, "features", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {2, 1}, std::vector<float>{0, 0});
    add_set(f, "labels", H5T_STD_I32LE, H5T_NATIVE_INT32, {2}, std::vector<std::int32_t>{0, -3});
    add_num_classes(f, "labels", 2);
  });
  expect_file_error(negative, {"data set 'labels'", "label -3 of sample 1"});
}

// The message for a data set of the wrong type names that type in words a reader knows.
// Before, a damaged integer type read "int0" or "int4294967328", and other classes "string",
// "compound", "a non-numeric type".
TEST(Hdf5, WrongTypesAreNamedInRealWords) {
  TempDir dir;
  // Labels of the given file and memory type (4 samples), features good.
  auto labels_of = [&](const std::string& name, hid_t file_type, hid_t mem_type, std::size_t value_bytes) {
    const auto path = dir.file(name + ".h5");
    make_file(path, [&](hid_t f) {
      add_set(f, "features", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {4, 2}, std::vector<float>(8, 0.0f));
      const hsize_t n = 4;
      const hid_t space = H5Screate_simple(1, &n, nullptr);
      const hid_t set = H5Dcreate2(f, "labels", file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      ASSERT_GE(set, 0) << name;
      if (mem_type >= 0) {
        std::vector<unsigned char> zeros(4 * value_bytes, 0);
        ASSERT_GE(H5Dwrite(set, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, zeros.data()), 0) << name;
      }
      H5Dclose(set);
      H5Sclose(space);
    });
    return path;
  };
  expect_file_error(labels_of("u8", H5T_STD_U8LE, H5T_NATIVE_UINT8, 1), {"must be 1-D int32 (N) but is 1-D uint8"});
  expect_file_error(labels_of("i16be", H5T_STD_I16BE, H5T_NATIVE_INT16, 2), {"1-D int16 (big-endian)"});
  expect_file_error(labels_of("f64", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 8), {"1-D float64"});

  const hid_t fixed = H5Tcopy(H5T_C_S1);
  H5Tset_size(fixed, 6);
  expect_file_error(labels_of("fixed", fixed, -1, 0), {"1-D of a fixed-length string type of 6 bytes"});
  const hid_t variable = H5Tcopy(H5T_C_S1);
  H5Tset_size(variable, H5T_VARIABLE);
  expect_file_error(labels_of("variable", variable, -1, 0), {"1-D of a variable-length string type"});
  const hid_t pair = H5Tcreate(H5T_COMPOUND, 8);
  H5Tinsert(pair, "r", 0, H5T_IEEE_F32LE);
  H5Tinsert(pair, "i", 4, H5T_IEEE_F32LE);
  expect_file_error(labels_of("compound", pair, -1, 0),
                    {"1-D of a compound type of 2 members (r: float32, i: float32)"});
  const hid_t flag = H5Tenum_create(H5T_STD_I8LE);
  signed char no = 0, yes = 1;
  H5Tenum_insert(flag, "FALSE", &no);
  H5Tenum_insert(flag, "TRUE", &yes);
  expect_file_error(labels_of("enum", flag, -1, 0), {"1-D of an enum type over int8"});
  const hsize_t two = 2;
  const hid_t array = H5Tarray_create2(H5T_STD_I32LE, 1, &two);
  expect_file_error(labels_of("array", array, -1, 0), {"1-D of an array type (2 of int32 in each element)"});
  const hid_t opaque = H5Tcreate(H5T_OPAQUE, 3);
  expect_file_error(labels_of("opaque", opaque, -1, 0), {"1-D of an opaque type of 3 bytes"});
  const hid_t odd = H5Tcopy(H5T_STD_I32LE);
  H5Tset_size(odd, 3);
  H5Tset_precision(odd, 24);
  expect_file_error(labels_of("int24", odd, -1, 0), {"1-D of a 24-bit integer type in 3 bytes"});
  for (const hid_t t : {fixed, variable, pair, flag, array, opaque, odd}) H5Tclose(t);

  // A damaged type: the 4-byte size of the labels' int32 type message rewritten to 0 and to
  // 0x20000004 (an "integer" of 536870916 bytes).
  for (const std::uint32_t size : {0U, 0x20000004U}) {
    const auto path = dir.file("damaged-" + std::to_string(size) + ".h5");
    make_file(path, [](hid_t f) { good_sets(f); });  // no num_classes: one int32 type message
    std::string bytes = slurp(path);
    const std::string int32_message("\x10\x08\x00\x00\x04\x00\x00\x00\x00\x00\x20\x00", 12);
    const auto at = bytes.find(int32_message);
    ASSERT_NE(at, std::string::npos);
    ASSERT_EQ(bytes.find(int32_message, at + 1), std::string::npos) << "one int32 type message";
    for (int k = 0; k < 4; ++k)
      bytes[at + 4 + static_cast<std::size_t>(k)] = static_cast<char>((size >> (8 * k)) & 0xFF);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    expect_file_error(path, {"data set 'labels'", "1-D of a damaged integer type (" + std::to_string(size) +
                                                      " bytes for 32 bits of precision)"});
    try {
      Hdf5Dataset data(path);
    } catch (const antdt::FileError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.find("int0"), std::string::npos) << what;
      EXPECT_EQ(what.find("int4294967328"), std::string::npos) << what;
    }
  }
}

// sample_shape: written from InMemoryDataset::set_sample_shape, read by Hdf5Dataset (and
// passed through SubsetDataset); absent means empty; a bad attribute is a one-line FileError.
TEST(Hdf5, SampleShapeRoundTripAndBadAttributes) {
  TempDir dir;
  auto data = make_synthetic({6, 12, 2, 1});
  EXPECT_TRUE(data.sample_shape().empty());
  EXPECT_THROW(data.set_sample_shape({1, 3, 3}), antdt::UsageError) << "9 values, not 12";
  EXPECT_THROW(data.set_sample_shape({0, 12}), antdt::UsageError);
  EXPECT_THROW(data.set_sample_shape({-1, -12}), antdt::UsageError);
  data.set_sample_shape({3, 2, 2});
  const auto shaped = dir.file("shaped.h5");
  write_hdf5(shaped, data);
  EXPECT_EQ(Hdf5Dataset(shaped).sample_shape(), (std::vector<std::int64_t>{3, 2, 2}));
  SubsetDataset subset(std::make_unique<Hdf5Dataset>(shaped), {1});
  EXPECT_EQ(subset.sample_shape(), (std::vector<std::int64_t>{3, 2, 2}));
  data.set_sample_shape({});
  const auto plain = dir.file("plain.h5");
  write_hdf5(plain, data);
  EXPECT_TRUE(Hdf5Dataset(plain).sample_shape().empty());

  // Attributes written by hand on good sets of 6 x 3 features.
  auto with_shape = [&](const std::string& name, hid_t type, std::vector<hsize_t> dims, const void* values) {
    const auto path = dir.file(name + ".h5");
    make_file(path, [&](hid_t f) {
      good_sets(f);
      const hid_t set = H5Dopen2(f, "features", H5P_DEFAULT);
      const hid_t space =
          dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
      const hid_t attr = H5Acreate2(set, "sample_shape", type, space, H5P_DEFAULT, H5P_DEFAULT);
      ASSERT_GE(H5Awrite(attr, type, values), 0);
      H5Aclose(attr);
      H5Sclose(space);
      H5Dclose(set);
    });
    return path;
  };
  const std::int32_t good32[2] = {1, 3};
  EXPECT_EQ(Hdf5Dataset(with_shape("int32", H5T_NATIVE_INT32, {2}, good32)).sample_shape(),
            (std::vector<std::int64_t>{1, 3}))
      << "any integer type is read";
  const std::int64_t product[3] = {1, 2, 2};
  expect_file_error(with_shape("product", H5T_NATIVE_INT64, {3}, product),
                    {"data set 'features'", "attribute 'sample_shape' is [1, 2, 2]", "3 features per sample"});
  const std::int64_t zero[2] = {0, 3};
  expect_file_error(with_shape("zero", H5T_NATIVE_INT64, {2}, zero), {"sample_shape' is [0, 3]", ">= 1"});
  const std::int64_t huge[3] = {std::int64_t{1} << 40, std::int64_t{1} << 40, 3};
  expect_file_error(with_shape("huge", H5T_NATIVE_INT64, {3}, huge), {"sample_shape' is [1099511627776"});
  const std::int64_t square[4] = {1, 3, 1, 1};
  expect_file_error(with_shape("2d", H5T_NATIVE_INT64, {2, 2}, square), {"sample_shape' must be a 1-D list", "2-D"});
  const double real[2] = {1.0, 3.0};
  expect_file_error(with_shape("float", H5T_NATIVE_DOUBLE, {2}, real), {"sample_shape' must be", "float64"});
  const std::int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 3};
  expect_file_error(with_shape("nine", H5T_NATIVE_INT64, {9}, nine), {"1 to 8 integers", "with 9 values"});
}

// write_hdf5 writes a new temporary beside the target and renames it over the target: through
// a symbolic link the target file is replaced and the link stays; a user's file that happens
// to be named like the old fixed temporary ("x.h5.tmp") is never touched; nothing is left.
TEST(Hdf5, WriteReplacesALinksTargetAndNeverTouchesOtherFiles) {
  TempDir dir;
  const auto target = dir.file("real.h5");
  const auto link = dir.file("link.h5");
  write_hdf5(target, make_synthetic({5, 2, 2, 1}));
  fs::create_symlink(target, link);
  const auto mine = link + ".tmp";
  std::ofstream(mine) << "the user's own file\n";
  const auto target_tmp = target + ".tmp";
  std::ofstream(target_tmp) << "another of the user's files\n";
  write_hdf5(link, make_synthetic({9, 2, 2, 1}));
  EXPECT_TRUE(fs::is_symlink(link)) << "the link is still a link";
  EXPECT_EQ(Hdf5Dataset(target).size(), 9) << "its target holds the new data";
  EXPECT_EQ(slurp(mine), "the user's own file\n");
  EXPECT_EQ(slurp(target_tmp), "another of the user's files\n");
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(fs::path(target).parent_path())) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"link.h5", "link.h5.tmp", "real.h5", "real.h5.tmp"}))
      << "no temporary is left behind";
}

TEST(Hdf5, WriteFailureIsAWriteErrorAndLeavesNothingBehind) {
  TempDir dir;
  const auto path = dir.file("no-such-dir/out.h5");
  try {
    write_hdf5(path, make_synthetic({4, 2, 2, 1}));
    FAIL() << "writing into a missing directory did not throw";
  } catch (const antdt::WriteError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
  }
  EXPECT_FALSE(fs::exists(path));
}

TEST(NonFinite, ScanFindsEveryNonFiniteSampleAndTheSubsetSkipsThem) {
  const std::int64_t n = 23, dim = 3;
  std::vector<float> features(static_cast<std::size_t>(n * dim));
  std::vector<std::int32_t> labels(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    labels[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i % 2);
    for (std::int64_t j = 0; j < dim; ++j) features[static_cast<std::size_t>(i * dim + j)] = static_cast<float>(i);
  }
  features[0 * dim + 2] = std::numeric_limits<float>::quiet_NaN();
  features[9 * dim + 1] = std::numeric_limits<float>::infinity();
  features[22 * dim + 0] = -std::numeric_limits<float>::infinity();
  auto base = std::make_unique<InMemoryDataset>(features, labels, dim, 2);
  // Any chunk size, any slicing: the slices' results join to the same list.
  for (const std::int64_t chunk : {1, 4, 100}) {
    EXPECT_EQ(find_non_finite(*base, 0, n, chunk), (std::vector<std::int64_t>{0, 9, 22})) << chunk;
  }
  EXPECT_EQ(find_non_finite(*base, 1, 9), std::vector<std::int64_t>{});
  EXPECT_EQ(find_non_finite(*base, 9, 23), (std::vector<std::int64_t>{9, 22}));
  EXPECT_THROW((void)find_non_finite(*base, 5, 24), antdt::UsageError);

  SubsetDataset kept(std::move(base), {0, 9, 22});
  ASSERT_EQ(kept.size(), n - 3);
  EXPECT_EQ(kept.dim(), dim);
  EXPECT_EQ(kept.base_index(0), 1);
  EXPECT_EQ(kept.base_index(8), 10);
  // Kept sample i is base sample base_index(i), in request order, and all of it is finite.
  std::vector<std::int64_t> request{19, 0, 7, 8, 8};
  std::vector<float> x(request.size() * dim);
  std::vector<std::int32_t> y(request.size());
  kept.read(request, x.data(), y.data());
  for (std::size_t k = 0; k < request.size(); ++k) {
    const std::int64_t b = kept.base_index(request[k]);
    EXPECT_EQ(y[k], b % 2);
    for (std::int64_t j = 0; j < dim; ++j) EXPECT_EQ(x[k * dim + static_cast<std::size_t>(j)], static_cast<float>(b));
  }
  const std::vector<std::int64_t> outside{n - 3};
  EXPECT_THROW(kept.read(outside, x.data(), y.data()), antdt::UsageError);
  EXPECT_THROW(SubsetDataset(std::make_unique<InMemoryDataset>(features, labels, dim, 2), {9, 0}), antdt::UsageError);
}
