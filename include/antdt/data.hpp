// Training data: N samples of D float32 features and one int32 class label each.
// Readers take the sample indices the DDS hands out; indices come as runs of consecutive
// values (one run per shard piece), which readers turn into contiguous reads.
//
// HDF5 layout (written by write_hdf5 and antdt-datagen, read by Hdf5Dataset):
//   /features  N x D float32
//   /labels    N     int32, with attribute "num_classes" (int32); labels lie in [0, num_classes)
// and, optionally, on /features the attribute "sample_shape" (int64 [k]): the shape of one
// sample, [C, H, W] for images, whose product is D.
// The names of the two data sets are configurable (Hdf5Names).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace antdt::data {

class Dataset {
 public:
  Dataset() = default;
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;
  virtual ~Dataset() = default;

  [[nodiscard]] virtual std::int64_t size() const = 0;
  [[nodiscard]] virtual std::int64_t dim() const = 0;
  [[nodiscard]] virtual std::int32_t num_classes() const = 0;
  // Reads the given samples, in that order, into features (indices.size() * dim floats,
  // row-major) and labels (indices.size()). Indices may repeat and come in any order.
  // Throws UsageError for an index outside [0, size()), FileError for a failed read.
  virtual void read(std::span<const std::int64_t> indices, float* features, std::int32_t* labels) = 0;
  // The shape of one sample, whose product is dim(): [C, H, W] for images (a sample's D
  // features are then its pixels, channel by channel, row by row). Empty when the data set
  // has none (plain feature vectors).
  [[nodiscard]] virtual std::vector<std::int64_t> sample_shape() const { return {}; }

 protected:
  Dataset(Dataset&&) = default;
  Dataset& operator=(Dataset&&) = default;
};

// A data set held in memory (owns its vectors).
class InMemoryDataset final : public Dataset {
 public:
  // Throws UsageError if features.size() != labels.size() * dim, dim < 1, num_classes < 1
  // or a label lies outside [0, num_classes).
  InMemoryDataset(std::vector<float> features, std::vector<std::int32_t> labels, std::int64_t dim,
                  std::int32_t num_classes);
  InMemoryDataset(InMemoryDataset&&) = default;
  InMemoryDataset& operator=(InMemoryDataset&&) = default;

  [[nodiscard]] std::int64_t size() const override { return static_cast<std::int64_t>(labels_.size()); }
  [[nodiscard]] std::int64_t dim() const override { return dim_; }
  [[nodiscard]] std::int32_t num_classes() const override { return num_classes_; }
  void read(std::span<const std::int64_t> indices, float* features, std::int32_t* labels) override;
  [[nodiscard]] std::vector<std::int64_t> sample_shape() const override { return sample_shape_; }
  // Sets the shape of one sample (write_hdf5 stores it). UsageError unless every extent is
  // >= 1 and their product is dim(); an empty shape clears it.
  void set_sample_shape(std::vector<std::int64_t> shape);

  [[nodiscard]] const std::vector<float>& features() const noexcept { return features_; }
  [[nodiscard]] const std::vector<std::int32_t>& labels() const noexcept { return labels_; }

 private:
  std::vector<float> features_;
  std::vector<std::int32_t> labels_;
  std::int64_t dim_;
  std::int32_t num_classes_;
  std::vector<std::int64_t> sample_shape_;
};

// The same samples stably sorted by label (every sample of class 0 first, in their order,
// then class 1, ...), with the same sample shape. For data stored in class order, which a
// trainer must shuffle.
[[nodiscard]] InMemoryDataset sorted_by_class(const InMemoryDataset& data);

// Gaussian clusters: class c has a centre drawn from N(0, separation^2) per dimension;
// sample i has a uniformly drawn class and features centre + noise * N(0, 1). Learnable by
// a linear model or an MLP when noise is small against the centre distances. Sample i
// depends only on (seed, i), so any subset can be regenerated independently.
struct SyntheticSpec {
  std::int64_t samples = 0;
  std::int64_t dim = 0;
  std::int32_t classes = 0;
  std::uint64_t seed = 0;
  float noise = 1.0f;
  float separation = 2.0f;
  // Sample i of the result is sample first + i of the seed's sequence: [0, n) and [n, n + m)
  // are a training set and a held-out set from the same distribution (the same centres).
  std::int64_t first = 0;
};
// Throws UsageError on samples < 1, dim < 1, classes < 1, negative noise or first < 0.
[[nodiscard]] InMemoryDataset make_synthetic(const SyntheticSpec& spec);

// Images of handwriting-like digits (docs/data.md, "Digit images"): class c is the digit c,
// drawn as pen strokes at a random position, scale, slant, rotation, stroke width and ink,
// with smooth random bends of the strokes, up to two faint stray strokes and Gaussian pixel
// noise, into a 1 x size x size image of pixel values in [0, 1] (background 0, ink up to 1;
// values with noise are clipped to [0, 1]).
// The result's sample_shape() is {1, size, size} and dim() is size * size. Sample i depends
// only on (seed, first + i), and its class is drawn uniformly from [0, classes).
struct DigitImageSpec {
  std::int64_t samples = 0;
  std::int32_t classes = 10;  // the digits 0 .. classes - 1; 2 to 10
  std::int32_t size = 28;     // height and width in pixels; 8 to 256
  std::uint64_t seed = 0;
  float noise = 0.25f;  // standard deviation of the pixel noise; >= 0
  std::int64_t first = 0;
};
// Throws UsageError on a value outside the ranges above, samples < 1 or first < 0.
[[nodiscard]] InMemoryDataset make_digit_images(const DigitImageSpec& spec);

// independent: each rank opens the file on its own with the default (sec2) driver.
// collective: the MPI-IO driver on a communicator; opening and closing are collective, the
// reads themselves are independent transfers (ranks read different amounts each step, so
// collective transfers would deadlock).
enum class ReadMode { independent, collective };

struct Hdf5Names {
  std::string features = "features";
  std::string labels = "labels";
};

// A data set in an HDF5 file, opened read-only: nothing in the file is ever modified.
// The constructor validates the file and throws a one-line FileError naming the file, the
// data set and what is wrong. Labels (4 bytes a sample) are read and validated once and
// kept in memory; features are read on demand, one hyperslab per run of indices.
// With ReadMode::collective, construction and destruction are collective over `comm`
// (which must outlive the object); with independent, `comm` is ignored.
class Hdf5Dataset final : public Dataset {
 public:
  explicit Hdf5Dataset(const std::string& path, Hdf5Names names = {}, ReadMode mode = ReadMode::independent,
                       MPI_Comm comm = MPI_COMM_SELF);
  ~Hdf5Dataset() override;

  [[nodiscard]] std::int64_t size() const override { return size_; }
  [[nodiscard]] std::int64_t dim() const override { return dim_; }
  [[nodiscard]] std::int32_t num_classes() const override { return num_classes_; }
  void read(std::span<const std::int64_t> indices, float* features, std::int32_t* labels) override;

  // From the attribute "sample_shape" of the features data set; empty without one. The
  // constructor refuses an attribute that is not a 1-D list of 1 to 8 integers >= 1 whose
  // product is dim().
  [[nodiscard]] std::vector<std::int64_t> sample_shape() const override { return sample_shape_; }

  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  [[nodiscard]] ReadMode mode() const noexcept { return mode_; }
  // HDF5 read calls issued so far (for tests and the benchmark: runs must be coalesced).
  [[nodiscard]] std::int64_t read_calls() const noexcept { return read_calls_; }

 private:
  struct Handles;
  std::string path_;
  Hdf5Names names_;
  ReadMode mode_;
  std::unique_ptr<Handles> h_;
  std::vector<std::int32_t> labels_;
  std::vector<float> staging_;
  std::int64_t size_ = 0;
  std::int64_t dim_ = 0;
  std::int32_t num_classes_ = 0;
  std::int64_t read_calls_ = 0;
  std::vector<std::int64_t> sample_shape_;
};

// Non-finite features (docs/data.md, "NaN and Inf"). Reads samples [first, last) of `data` in
// chunks of `chunk` rows and returns, ascending, the indices of those with a NaN or an
// infinite feature. Each rank scans its own slice; antdt-train joins the slices.
[[nodiscard]] std::vector<std::int64_t> find_non_finite(Dataset& data, std::int64_t first, std::int64_t last,
                                                        std::int64_t chunk = 4096);

// The samples of `base` that are not in `dropped` (ascending, unique, in [0, base.size())),
// renumbered 0..size()-1 in their original order, so that the DDS shards, and its
// exactly-once accounting covers, only the kept samples. Consecutive kept samples map to
// consecutive rows of `base`, so a run of indices stays one read wherever no sample was
// dropped inside it. Owns `base`. UsageError when `dropped` is not as described or drops
// every sample.
class SubsetDataset final : public Dataset {
 public:
  SubsetDataset(std::unique_ptr<Dataset> base, const std::vector<std::int64_t>& dropped);

  [[nodiscard]] std::int64_t size() const override { return static_cast<std::int64_t>(kept_.size()); }
  [[nodiscard]] std::int64_t dim() const override { return base_->dim(); }
  [[nodiscard]] std::int32_t num_classes() const override { return base_->num_classes(); }
  void read(std::span<const std::int64_t> indices, float* features, std::int32_t* labels) override;
  [[nodiscard]] std::vector<std::int64_t> sample_shape() const override { return base_->sample_shape(); }

  [[nodiscard]] const Dataset& base() const noexcept { return *base_; }
  // base index of kept sample i
  [[nodiscard]] std::int64_t base_index(std::int64_t i) const { return kept_.at(static_cast<std::size_t>(i)); }

 private:
  std::unique_ptr<Dataset> base_;
  std::vector<std::int64_t> kept_;
  std::vector<std::int64_t> mapped_;  // scratch of read()
};

// Writes `data` to `path` in the layout above (with the num_classes attribute, and
// sample_shape when data.sample_shape() is not empty), so that it is there whole or not at
// all: a new temporary file beside it (a unique hidden name), every HDF5 call checked, fsync,
// rename over `path` (over a symbolic link's target, not the link), fsync of the directory.
// On failure (a full disk, say) the temporary is removed and an earlier file of that name is
// left as it was. Throws WriteError (a FileError) on failure. It replaces an existing file:
// callers that must not (antdt-datagen without --overwrite) check first.
void write_hdf5(const std::string& path, const InMemoryDataset& data, Hdf5Names names = {});

}  // namespace antdt::data
