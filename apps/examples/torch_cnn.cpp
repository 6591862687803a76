// A small CNN trained with libtorch under antdt (docs/torch.md): digit images from
// antdt-datagen, SGD with momentum, every policy, checkpoints and resume.
//
//   antdt-datagen --kind digits -n 20000 -o digits.h5 --eval-output digits-test.h5 --eval-samples 2000
//   mpirun -np 2 antdt-example-torch-cnn --data digits.h5 --test-data digits-test.h5
//          --global-batch 256 --epochs 2 --policy dd --checkpoint-dir ckpt
//
// The lines that deal with antdt are marked "// antdt".
#include <torch/torch.h>
#include <CLI/CLI.hpp>
#include <antdt/cli.hpp>      // antdt: add_job_options, parse, Job, run_main
#include <antdt/runtime.hpp>  // antdt: Environment
#include <antdt/torch.hpp>    // antdt

#include <string>

#include "torch_cnn_model.hpp"

namespace F = torch::nn::functional;

// Accuracy on held-out images, in batches of 1000.
double accuracy(Cnn& model, antdt::TorchDataset& images) {  // antdt
  torch::NoGradGuard no_grad;
  const std::int64_t n = static_cast<std::int64_t>(images.size().value());
  std::int64_t correct = 0;
  for (std::int64_t first = 0; first < n; first += 1000) {
    const auto idx = torch::arange(first, std::min(n, first + 1000), torch::kLong);
    auto batch = images.read({idx.data_ptr<std::int64_t>(), static_cast<std::size_t>(idx.numel())});  // antdt
    correct += model->forward(batch.data).argmax(1).eq(batch.target).sum().item<std::int64_t>();
  }
  return static_cast<double>(correct) / static_cast<double>(n);
}

int main(int argc, char** argv) {
  antdt::Environment env(argc, argv);  // antdt
  CLI::App app{"A small CNN on digit images, trained with libtorch under antdt", "torch-cnn"};
  antdt::JobOptions options;             // antdt
  antdt::add_job_options(app, options);  // antdt
  std::string train_path, test_path, device = "cpu";
  double lr = 0.05, momentum = 0.9;
  int threads = 1;
  std::uint64_t model_seed = 0;
  app.add_option("--data", train_path, "Training images (antdt-datagen --kind digits)")->required();
  app.add_option("--test-data", test_path, "Held-out images: their accuracy is reported at the end");
  app.add_option("--lr", lr, "SGD learning rate")->capture_default_str();
  app.add_option("--momentum", momentum, "SGD momentum")->capture_default_str();
  app.add_option("--threads", threads, "libtorch threads per rank (one rank per core: 1)")->capture_default_str();
  app.add_option("--model-seed", model_seed, "Seed of the model's initial weights")->capture_default_str();
  app.add_option("--device", device, "cpu, or cuda with a CUDA build of libtorch")->capture_default_str();
  if (int code = antdt::parse(app, argc, argv, options); code >= 0) return code;  // antdt

  return antdt::run_main("torch-cnn", [&] {  // antdt
    torch::set_num_threads(threads);
    antdt::data::Hdf5Dataset train(train_path);                                    // antdt
    options.session.dataset_size = train.size();                                   // antdt
    options.inputs = {{"--data", train_path}};                                     // antdt
    if (!test_path.empty()) options.inputs.push_back({"--test-data", test_path});  // antdt
    antdt::Job job(options);                                                       // antdt

    torch::manual_seed(model_seed);
    Cnn model(train.sample_shape(), train.num_classes());
    model->to(torch::Device(device));
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(lr).momentum(momentum));
    antdt::TorchBridge bridge(job, *model, optimizer);             // antdt
    antdt::TorchDataset images(train, {}, torch::Device(device));  // antdt
    job.on_report([&](antdt::RunSummary& summary) {                // antdt
      summary.parameter_checksum = antdt::torch_checksum(*model);  // antdt
      if (test_path.empty()) return;
      antdt::data::Hdf5Dataset test_file(test_path);                   // antdt
      antdt::TorchDataset test(test_file, {}, torch::Device(device));  // antdt
      summary.eval_accuracy = accuracy(model, test);                   // antdt
    });

    while (job.next_step()) {                                                                // antdt
      bridge.zero_grad();                                                                    // antdt
      for (auto idx = job.next_micro_batch(); !idx.empty(); idx = job.next_micro_batch()) {  // antdt
        auto batch = images.read(idx);                                                       // antdt
        auto logits = model->forward(batch.data);
        auto loss = F::cross_entropy(logits, batch.target, F::CrossEntropyFuncOptions().reduction(torch::kSum));
        loss.backward();
        job.add_loss(loss.item<double>(), logits.argmax(1).eq(batch.target).sum().item<std::int64_t>());  // antdt
      }
      bridge.step();  // antdt: the mean gradient over the step's global batch, then optimizer.step()
    }
    return job.exit_code();  // antdt
  });
}
