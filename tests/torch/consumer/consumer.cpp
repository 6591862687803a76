// Built against the installed package by tests/torch/run_install_consumer.cmake.
#include <antdt/torch.hpp>
#include <antdt/torch.hpp>  // twice: the include guard holds

#include <torch/nn/modules/linear.h>

#include <cstdio>

int main() {
  torch::manual_seed(1);
  torch::nn::Linear layer(3, 2);
  antdt::TorchGradients gradients(layer->parameters());
  std::printf("antdt torch consumer OK: %lld gradient values, checksum %s\n", static_cast<long long>(gradients.numel()),
              antdt::torch_checksum(*layer).c_str());
  return gradients.numel() == 3 * 2 + 2 ? 0 : 1;
}
