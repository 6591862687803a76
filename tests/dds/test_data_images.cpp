// Digit images (make_digit_images) and data stored in class order (sorted_by_class): shape,
// determinism, disjoint training and held-out draws, pixel range, class structure that a
// simple classifier finds, the round trip through HDF5 with the sample_shape attribute, and a
// contact sheet (PGM) a person can look at.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "antdt/data.hpp"
#include "antdt/error.hpp"
#include "data_test_files.hpp"

using namespace antdt::data;
using antdt::test::slurp;
using antdt::test::TempDir;
namespace fs = std::filesystem;

namespace {

DigitImageSpec spec_of(std::int64_t samples, std::uint64_t seed = 7, std::int64_t first = 0) {
  DigitImageSpec spec;
  spec.samples = samples;
  spec.seed = seed;
  spec.first = first;
  return spec;
}

// A grid of `columns` images a row, one row per class (the first `columns` of each class in
// `data`), as a binary PGM with 1-pixel gaps; returns the grid's pixels (0-255, row-major).
std::vector<unsigned char> contact_sheet(const InMemoryDataset& data, int columns, int& width, int& height) {
  const auto shape = data.sample_shape();
  const int side = static_cast<int>(shape.at(1));
  const int classes = data.num_classes();
  width = columns * (side + 1) + 1;
  height = classes * (side + 1) + 1;
  std::vector<unsigned char> grid(static_cast<std::size_t>(width) * static_cast<std::size_t>(height), 128);
  for (int c = 0; c < classes; ++c) {
    int placed = 0;
    for (std::int64_t i = 0; i < data.size() && placed < columns; ++i) {
      if (data.labels()[static_cast<std::size_t>(i)] != c) continue;
      const float* img = data.features().data() + i * data.dim();
      for (int y = 0; y < side; ++y) {
        for (int x = 0; x < side; ++x) {
          const int gx = 1 + placed * (side + 1) + x;
          const int gy = 1 + c * (side + 1) + y;
          grid[static_cast<std::size_t>(gy) * static_cast<std::size_t>(width) + static_cast<std::size_t>(gx)] =
              static_cast<unsigned char>(std::clamp(img[y * side + x], 0.0f, 1.0f) * 255.0f + 0.5f);
        }
      }
      ++placed;
    }
  }
  return grid;
}

void write_pgm(const std::string& path, const std::vector<unsigned char>& pixels, int width, int height) {
  std::ofstream out(path, std::ios::binary);
  out << "P5\n" << width << " " << height << "\n255\n";
  out.write(reinterpret_cast<const char*>(pixels.data()), static_cast<std::streamsize>(pixels.size()));
}

}  // namespace

TEST(DigitImages, ShapedDeterministicAndInRange) {
  const auto a = make_digit_images(spec_of(300));
  EXPECT_EQ(a.size(), 300);
  EXPECT_EQ(a.dim(), 28 * 28);
  EXPECT_EQ(a.num_classes(), 10);
  EXPECT_EQ(a.sample_shape(), (std::vector<std::int64_t>{1, 28, 28}));
  EXPECT_EQ(a.features(), make_digit_images(spec_of(300)).features()) << "same seed, same images";
  EXPECT_EQ(a.labels(), make_digit_images(spec_of(300)).labels());
  EXPECT_NE(a.features(), make_digit_images(spec_of(300, 8)).features()) << "another seed, other images";
  const auto [lo, hi] = std::minmax_element(a.features().begin(), a.features().end());
  EXPECT_GE(*lo, 0.0f);
  EXPECT_LE(*hi, 1.0f);
  EXPECT_GT(*hi, 0.7f) << "ink reaches at least the faintest ink level";
  // Every class occurs; every image has ink: far more pixels above 0.5 than noise alone gives.
  std::vector<int> count(10, 0);
  for (const auto label : a.labels()) ++count[static_cast<std::size_t>(label)];
  for (int c = 0; c < 10; ++c) EXPECT_GT(count[static_cast<std::size_t>(c)], 10) << "class " << c;
  for (std::int64_t i = 0; i < a.size(); ++i) {
    const float* img = a.features().data() + i * a.dim();
    const auto inked = std::count_if(img, img + a.dim(), [](float v) { return v > 0.5f; });
    EXPECT_GT(inked, 20) << "image " << i;
  }
  // Other sizes and fewer classes.
  DigitImageSpec small = spec_of(50);
  small.size = 12;
  small.classes = 3;
  small.noise = 0.0f;
  const auto s = make_digit_images(small);
  EXPECT_EQ(s.dim(), 144);
  EXPECT_EQ(s.sample_shape(), (std::vector<std::int64_t>{1, 12, 12}));
  EXPECT_TRUE(std::all_of(s.labels().begin(), s.labels().end(), [](std::int32_t l) { return l >= 0 && l < 3; }));
  for (auto bad : {spec_of(0), spec_of(5, 7, -1)}) EXPECT_THROW((void)make_digit_images(bad), antdt::UsageError);
  DigitImageSpec bad = spec_of(5);
  bad.classes = 11;
  EXPECT_THROW((void)make_digit_images(bad), antdt::UsageError);
  bad = spec_of(5);
  bad.size = 7;
  EXPECT_THROW((void)make_digit_images(bad), antdt::UsageError);
  bad = spec_of(5);
  bad.noise = -0.1f;
  EXPECT_THROW((void)make_digit_images(bad), antdt::UsageError);
}

// Sample i is sample first + i of the seed's sequence: a held-out set [n, n + m) made on its own
// is exactly the tail of one draw of n + m, and shares no image with the training set [0, n).
TEST(DigitImages, HeldOutSetIsTheContinuationOfOneDraw) {
  const auto all = make_digit_images(spec_of(120));
  const auto train = make_digit_images(spec_of(100));
  const auto held_out = make_digit_images(spec_of(20, 7, 100));
  const auto dim = static_cast<std::ptrdiff_t>(all.dim());
  EXPECT_TRUE(std::equal(train.features().begin(), train.features().end(), all.features().begin()));
  EXPECT_TRUE(std::equal(held_out.features().begin(), held_out.features().end(), all.features().begin() + 100 * dim));
  EXPECT_TRUE(std::equal(held_out.labels().begin(), held_out.labels().end(), all.labels().begin() + 100));
  for (std::int64_t i = 0; i < held_out.size(); ++i) {
    const auto row = held_out.features().begin() + i * dim;
    for (std::int64_t j = 0; j < train.size(); ++j) {
      ASSERT_FALSE(std::equal(row, row + dim, train.features().begin() + j * dim)) << i << " repeats " << j;
    }
  }
}

// The classes have a structure a simple classifier finds on held-out images: nearest class
// mean, fitted on 3000 images, is far above chance (10 %). It stays well below what a CNN
// reaches (docs/data.md): the jitter in position and shape is what a template cannot follow.
TEST(DigitImages, ClassesAreSeparableByASimpleClassifier) {
  const auto train = make_digit_images(spec_of(3000));
  const auto test = make_digit_images(spec_of(1000, 7, 3000));
  const auto correct = antdt::test::nearest_mean_correct(train, test);
  EXPECT_GT(correct, 250) << "nearest class mean: " << correct << " of 1000";
}

TEST(DigitImages, SortedByClassIsAStableSortThatKeepsTheShape) {
  const auto data = make_digit_images(spec_of(200));
  const auto sorted = sorted_by_class(data);
  EXPECT_TRUE(std::is_sorted(sorted.labels().begin(), sorted.labels().end()));
  EXPECT_EQ(sorted.sample_shape(), data.sample_shape());
  EXPECT_EQ(sorted.num_classes(), data.num_classes());
  // Within a class the original order: the k-th image of class c is the same in both.
  const auto dim = static_cast<std::ptrdiff_t>(data.dim());
  std::int64_t at = 0;
  for (std::int32_t c = 0; c < 10; ++c) {
    for (std::int64_t i = 0; i < data.size(); ++i) {
      if (data.labels()[static_cast<std::size_t>(i)] != c) continue;
      ASSERT_EQ(sorted.labels()[static_cast<std::size_t>(at)], c);
      ASSERT_TRUE(std::equal(data.features().begin() + i * dim, data.features().begin() + (i + 1) * dim,
                             sorted.features().begin() + at * dim));
      ++at;
    }
  }
  EXPECT_EQ(at, data.size());
}

// Through HDF5: the images and their shape come back; and a contact sheet of the first 12
// images of each class, written as a PGM, is what the images look like (ANTDT_DIGITS_SHEET=
// path keeps a copy to look at; the test checks the file holds the images' pixels).
TEST(DigitImages, RoundTripThroughHdf5AndAContactSheet) {
  TempDir dir("antdt-images-test-");
  const auto data = make_digit_images(spec_of(400));
  const auto path = dir.file("digits.h5");
  write_hdf5(path, data);
  Hdf5Dataset file(path);
  EXPECT_EQ(file.sample_shape(), (std::vector<std::int64_t>{1, 28, 28}));
  EXPECT_EQ(file.num_classes(), 10);
  std::vector<std::int64_t> all(400);
  for (std::int64_t i = 0; i < 400; ++i) all[static_cast<std::size_t>(i)] = i;
  std::vector<float> features(400 * 784);
  std::vector<std::int32_t> labels(400);
  file.read(all, features.data(), labels.data());
  EXPECT_EQ(features, data.features());
  EXPECT_EQ(labels, data.labels());

  int width = 0, height = 0;
  const auto grid = contact_sheet(data, 12, width, height);
  const auto sheet = dir.file("digits.pgm");
  write_pgm(sheet, grid, width, height);
  if (const char* keep = std::getenv("ANTDT_DIGITS_SHEET"); keep != nullptr && *keep != '\0') {
    fs::copy_file(sheet, keep, fs::copy_options::overwrite_existing);
  }
  const std::string bytes = slurp(sheet);
  const std::string header = "P5\n" + std::to_string(width) + " " + std::to_string(height) + "\n255\n";
  ASSERT_EQ(bytes.size(), header.size() + grid.size());
  EXPECT_EQ(bytes.substr(0, header.size()), header);
  // The first image of class 0 sits at (1, 1): its pixels, scaled to 0-255.
  const auto first_zero = std::find(data.labels().begin(), data.labels().end(), 0) - data.labels().begin();
  const float* img = data.features().data() + first_zero * data.dim();
  for (int y = 0; y < 28; ++y) {
    for (int x = 0; x < 28; ++x) {
      const auto at = header.size() + static_cast<std::size_t>(1 + y) * static_cast<std::size_t>(width) + 1 +
                      static_cast<std::size_t>(x);
      ASSERT_EQ(static_cast<unsigned char>(bytes[at]), static_cast<unsigned char>(img[y * 28 + x] * 255.0f + 0.5f));
    }
  }
}
