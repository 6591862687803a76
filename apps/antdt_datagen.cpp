// antdt-datagen: writes a synthetic, learnable classification data set to HDF5
// (features N x D float32, labels N int32), optionally with a held-out evaluation set drawn
// from the same distribution. Two kinds: Gaussian clusters (any D) and digit images (1 x S x S,
// with a sample_shape attribute), docs/data.md.
//
// It never destroys data: every check (paths, sizes, options) comes before anything is
// written; an existing output is refused unless --overwrite; the two outputs are never one
// file; both sets are written under temporary names and renamed into place only when both
// are whole, so a failure (a full disk) leaves no half-written file and earlier files as
// they were.
#include <unistd.h>

#include <cstdio>
#include <limits>
#include <optional>
#include <string>

#include "antdt/antdt.hpp"
#include "antdt/cli.hpp"
#include "antdt/data.hpp"
#include "antdt/error.hpp"
#include "job/paths.hpp"

namespace {

// Beyond any data set that fits a machine, and far from int64 overflow in the size checks.
constexpr std::int64_t kMaxSamples = std::int64_t{1} << 40;
constexpr std::int64_t kMaxDim = std::numeric_limits<std::int32_t>::max();  // what Hdf5Dataset reads
constexpr float kClusterNoise = 1.0f;
constexpr float kDigitNoise = 0.25f;

std::string bytes_text(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024 && u < 6) bytes /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", bytes, units[u]);
  return buf;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string out;
  for (const auto e : shape) out += (out.empty() ? "" : "x") + std::to_string(e);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  antdt::Environment env(argc, argv, antdt::without_jobs);
  CLI::App app{"antdt-datagen: write a synthetic, learnable classification data set to HDF5 (docs/data.md).",
               "antdt-datagen"};
  app.set_version_flag("--version", std::string("antdt ") + ANTDT_VERSION_STRING);
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a later --x wins
  app.set_config("--config", "", "Read options from a TOML/INI file (keys are the long option names)");
  std::string output, eval_output, kind = "clusters";
  std::int64_t samples = 8192, eval_samples = 0, dim = 32;
  std::int32_t classes = 10, image_size = 28;
  std::uint64_t seed = 7;
  float noise = kClusterNoise;
  bool overwrite = false, sort_by_class = false;
  antdt::data::Hdf5Names names;
  app.add_option("--output,-o", output, "Training set file to write (HDF5)")->required();
  app.add_option("--kind", kind,
                 "What to generate: 'clusters' (Gaussian clusters of --dim features) or 'digits' (images of the "
                 "digits 0-9, 1 x S x S pixels in [0, 1], S = --image-size, with a sample_shape attribute)")
      ->check(CLI::IsMember({"clusters", "digits"}))
      ->capture_default_str();
  app.add_option("--samples,-n", samples, "Number of training samples")
      ->check(antdt::cli::in_range<std::int64_t>(1, kMaxSamples))
      ->capture_default_str();
  CLI::Option* dim_opt = app.add_option("--dim,-d", dim, "Features per sample (clusters only)")
                             ->check(antdt::cli::in_range<std::int64_t>(1, kMaxDim))
                             ->capture_default_str();
  app.add_option("--classes,-c", classes, "Number of classes (digits: 2 to 10, the digits 0 to c-1)")
      ->check(antdt::cli::in_range<std::int32_t>(2, 1 << 20))
      ->capture_default_str();
  CLI::Option* size_opt = app.add_option("--image-size", image_size, "Height and width of an image (digits only)")
                              ->check(antdt::cli::in_range<std::int32_t>(8, 256))
                              ->capture_default_str();
  app.add_option("--seed", seed, "Seed (same seed, same data)")->capture_default_str();
  CLI::Option* noise_opt =
      app.add_option("--noise", noise,
                     "Clusters: spread of each class around its centre (default 1). Digits: standard deviation of "
                     "the pixel noise (default 0.25). Higher is harder")
          ->check(antdt::cli::in_range<float>(0.0f, 1e6f));
  app.add_flag("--sort-by-class", sort_by_class,
               "Store the training set in class order (all of class 0, then class 1, ...), so that only a trainer "
               "that shuffles learns from it; the held-out set keeps its random order");
  app.add_option("--eval-output", eval_output,
                 "Also write a held-out set from the same distribution here (needs --eval-samples)");
  app.add_option("--eval-samples", eval_samples, "Samples of the held-out set (needs --eval-output)")
      ->check(antdt::cli::in_range<std::int64_t>(1, kMaxSamples));
  CLI::Option* overwrite_opt =
      app.add_flag("--overwrite", overwrite,
                   "Replace --output and --eval-output where they exist (without it an existing file is an error); "
                   "the two are never allowed to be one file. No environment variable: ask for it on the command "
                   "line or in --config");
  app.add_option("--features-name", names.features, "Name of the features data set")->capture_default_str();
  app.add_option("--labels-name", names.labels, "Name of the labels data set")->capture_default_str();
  antdt::cli::add_env_names(app);
  overwrite_opt->envname("");  // an exported variable, long forgotten, must not replace files
  antdt::cli::strict_config(app);
  const int parsed = antdt::parse(app, argc, argv);
  if (parsed >= 0) return parsed;
  return antdt::run_main("antdt-datagen", [&] {
    if (env.world_rank() != 0) return 0;  // one writer; other ranks (if any) have nothing to do
    using antdt::UsageError;
    const bool digits = kind == "digits";
    // Options of the other kind are errors, not silently ignored.
    if (digits && dim_opt->count() > 0) {
      throw UsageError("--dim does not apply to --kind digits: an image has --image-size squared features");
    }
    if (!digits && size_opt->count() > 0) throw UsageError("--image-size applies to --kind digits only");
    if (digits && classes > 10) {
      throw UsageError("--classes " + std::to_string(classes) + " with --kind digits: there are 10 digits (2 to 10)");
    }
    if (noise_opt->count() == 0) noise = digits ? kDigitNoise : kClusterNoise;
    if (!digits && noise == 0.0f)
      throw UsageError("--noise 0 with --kind clusters makes every sample its centre; give > 0");
    const std::int64_t features = digits ? std::int64_t{image_size} * image_size : dim;
    // Every output path before anything is generated: not a directory, its directory exists and
    // is writable, not the --config file, and the two outputs are not one file.
    const CLI::Option* config = app.get_config_ptr();
    const std::vector<antdt::cli::NamedPath> outputs = {{"--output", output}, {"--eval-output", eval_output}};
    antdt::cli::check_outputs(
        outputs, {{"--config", config != nullptr && config->count() > 0 ? config->as<std::string>() : std::string()}});
    if (!eval_output.empty() && eval_samples == 0) {
      throw UsageError("--eval-output needs --eval-samples (how many held-out samples to write)");
    }
    if (eval_output.empty() && eval_samples > 0) throw UsageError("--eval-samples needs --eval-output");
    antdt::cli::check_new_outputs(outputs, overwrite, "--overwrite");
    // The larger set is held in memory while it is written.
    const std::int64_t largest = std::max(samples, eval_samples);
    const double needed = static_cast<double>(largest) * static_cast<double>(features) * 4.0;
    const double memory = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
    if (memory > 0 && needed > memory) {
      throw UsageError(std::string(largest == samples ? "--samples " : "--eval-samples ") + std::to_string(largest) +
                       " x " + std::to_string(features) + " features needs " + bytes_text(needed) +
                       " of memory (float32), more than this machine's " + bytes_text(memory) +
                       "; generate fewer samples" + (digits ? "" : " or features"));
    }

    // Sample i depends on (seed, first + i) only, and the class centres of the clusters on the
    // seed: [0, n) and [n, n + m) are two draws of one distribution.
    auto make = [&](std::int64_t first, std::int64_t count) {
      if (digits) {
        return antdt::data::make_digit_images(
            {.samples = count, .classes = classes, .size = image_size, .seed = seed, .noise = noise, .first = first});
      }
      return antdt::data::make_synthetic(
          {.samples = count, .dim = dim, .classes = classes, .seed = seed, .noise = noise, .first = first});
    };
    // Both sets are written whole under temporary names, then both renamed into place.
    // A failure names the option and the user's path, not the temporary's.
    auto write = [&](const antdt::cli::StagedOutput& staged, const antdt::cli::NamedPath& out,
                     const antdt::data::InMemoryDataset& data) {
      try {
        antdt::data::write_hdf5(staged.path(), data, names);
      } catch (const antdt::FileError& e) {
        std::string what = e.what();
        const std::string temp_name = "data file '" + staged.path() + "'";
        if (const auto at = what.find(temp_name); at != std::string::npos) {
          what.replace(at, temp_name.size(), out.option + " '" + out.path + "'");
        }
        throw antdt::WriteError(what);
      }
    };
    antdt::cli::StagedOutput train_file(outputs[0], overwrite);
    std::optional<antdt::cli::StagedOutput> eval_file;
    std::vector<std::int64_t> shape;
    {
      antdt::data::InMemoryDataset train = make(0, samples);
      if (sort_by_class) train = antdt::data::sorted_by_class(train);
      shape = train.sample_shape();
      write(train_file, outputs[0], train);
    }
    if (!eval_output.empty()) {
      eval_file.emplace(outputs[1], overwrite);
      write(*eval_file, outputs[1], make(samples, eval_samples));
    }
    train_file.commit();
    if (eval_file) eval_file->commit();
    std::printf("antdt-datagen: wrote %s: %lld samples x %lld features%s, %d classes, %s (seed %llu)%s\n",
                output.c_str(), static_cast<long long>(samples), static_cast<long long>(features),
                shape.empty() ? "" : (" (images " + shape_text(shape) + ")").c_str(), classes, kind.c_str(),
                static_cast<unsigned long long>(seed), sort_by_class ? ", stored in class order" : "");
    if (eval_file) {
      std::printf("antdt-datagen: wrote %s: %lld held-out samples\n", eval_output.c_str(),
                  static_cast<long long>(eval_samples));
    }
    return 0;
  });
}
