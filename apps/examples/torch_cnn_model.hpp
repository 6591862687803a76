// The small CNN of apps/examples/torch_cnn.cpp, shared with its benchmark baseline
// (perf/torch/torch_baseline.cpp): two convolutions with pooling, then two linear layers.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

struct CnnImpl : torch::nn::Module {
  // shape: one image [C, H, W]; H and W at least 12 (two 5 x 5 convolutions, each pooled by 2).
  CnnImpl(const std::vector<std::int64_t>& shape, std::int64_t classes)
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(shape.at(0), 8, 5)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(8, 16, 5)))),
        fc1(register_module("fc1", torch::nn::Linear(16 * side(shape.at(1)) * side(shape.at(2)), 64))),
        fc2(register_module("fc2", torch::nn::Linear(64, classes))) {}

  // An image side after conv 5, pool 2, conv 5, pool 2.
  static std::int64_t side(std::int64_t n) { return ((n - 4) / 2 - 4) / 2; }

  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2(x)), 2);
    return fc2(torch::relu(fc1(x.flatten(1))));
  }

  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Cnn);
