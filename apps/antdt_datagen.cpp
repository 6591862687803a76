// antdt-datagen: writes a synthetic, learnable classification data set to HDF5
// (features N x D float32, labels N int32), optionally with a held-out evaluation set drawn
// from the same distribution.
#include <cstdio>
#include <string>

#include "antdt/antdt.hpp"
#include "antdt/data.hpp"
#include "cli/cli_common.hpp"
#include "cli/paths.hpp"

int main(int argc, char** argv) {
  antdt::Environment env(argc, argv);
  CLI::App app{"antdt-datagen: write a synthetic, learnable classification data set to HDF5.", "antdt-datagen"};
  app.set_version_flag("--version", std::string("antdt ") + ANTDT_VERSION_STRING);
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a later --x wins
  app.set_config("--config", "", "Read options from a TOML/INI file (keys are the long option names)");
  std::string output, eval_output;
  std::int64_t samples = 8192, eval_samples = 0, dim = 32;
  std::int32_t classes = 10;
  std::uint64_t seed = 7;
  float noise = 1.0f;
  antdt::data::Hdf5Names names;
  app.add_option("--output,-o", output, "Training set file to write (HDF5)")->required();
  app.add_option("--samples,-n", samples, "Number of training samples")
      ->check(antdt::cli::positive<std::int64_t>())
      ->capture_default_str();
  app.add_option("--dim,-d", dim, "Features per sample")
      ->check(antdt::cli::positive<std::int64_t>())
      ->capture_default_str();
  app.add_option("--classes,-c", classes, "Number of classes")
      ->check(antdt::cli::in_range<std::int32_t>(2, 1 << 20))
      ->capture_default_str();
  app.add_option("--seed", seed, "Seed (same seed, same data)")->capture_default_str();
  app.add_option("--noise", noise, "Spread of each class around its centre (higher is harder)")
      ->check(antdt::cli::positive<float>())
      ->capture_default_str();
  app.add_option("--eval-output", eval_output, "Also write a held-out set from the same distribution here");
  app.add_option("--eval-samples", eval_samples, "Samples of the held-out set")
      ->check(antdt::cli::at_least<std::int64_t>(0))
      ->capture_default_str();
  app.add_option("--features-name", names.features, "Name of the features data set")->capture_default_str();
  app.add_option("--labels-name", names.labels, "Name of the labels data set")->capture_default_str();
  antdt::cli::add_env_names(app);
  antdt::cli::strict_config(app);
  const int parsed = antdt::cli::parse(app, argc, argv, env.world_rank());
  if (parsed >= 0) return parsed;
  if (!eval_output.empty() && eval_samples == 0) eval_samples = std::max<std::int64_t>(1, samples / 4);
  if (eval_output.empty() && eval_samples > 0) {
    if (env.world_rank() == 0) std::fprintf(stderr, "antdt-datagen: error: --eval-samples needs --eval-output\n");
    return antdt::cli::kExitUsage;
  }
  return antdt::cli::guarded("antdt-datagen", env.world_rank(), 1, [&] {
    if (env.world_rank() != 0) return 0;  // one writer; other ranks (if any) have nothing to do
    // Both outputs are checked before either is written: the same file twice would leave the
    // evaluation set where the training set should be.
    const CLI::Option* config = app.get_config_ptr();
    antdt::cli::check_outputs(
        {{"--output", output}, {"--eval-output", eval_output}},
        {{"--config", config != nullptr && config->count() > 0 ? config->as<std::string>() : std::string()}});
    // One draw of samples + eval_samples, split, so both sets share the class centres.
    antdt::data::SyntheticSpec spec;
    spec.samples = samples + eval_samples;
    spec.dim = dim;
    spec.classes = classes;
    spec.seed = seed;
    spec.noise = noise;
    const auto all = antdt::data::make_synthetic(spec);
    const auto cut_f = all.features().begin() + samples * dim;
    const auto cut_l = all.labels().begin() + samples;
    antdt::data::InMemoryDataset train({all.features().begin(), cut_f}, {all.labels().begin(), cut_l}, dim, classes);
    antdt::data::write_hdf5(output, train, names);
    std::printf("antdt-datagen: wrote %s: %lld samples x %lld features, %d classes (seed %llu)\n", output.c_str(),
                static_cast<long long>(samples), static_cast<long long>(dim), classes,
                static_cast<unsigned long long>(seed));
    if (!eval_output.empty()) {
      antdt::data::InMemoryDataset held_out({cut_f, all.features().end()}, {cut_l, all.labels().end()}, dim, classes);
      antdt::data::write_hdf5(eval_output, held_out, names);
      std::printf("antdt-datagen: wrote %s: %lld held-out samples\n", eval_output.c_str(),
                  static_cast<long long>(eval_samples));
    }
    return 0;
  });
}
