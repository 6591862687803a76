// Fuzz target text: the option parsers. Byte 0 picks the parser; the rest is the text. Bad
// text must throw UsageError.
#include <cmath>
#include <string_view>

#include "antdt/emulation.hpp"
#include "core/log.hpp"
#include "fuzz_target.hpp"
#include "model/model.hpp"
#include "runtime/device.hpp"

namespace antdt::fuzz {

void run(std::span<const std::byte> input) {
  if (input.empty()) return;
  const auto rest = input.subspan(1);
  const std::string_view text(reinterpret_cast<const char*>(rest.data()), rest.size());
  try {
    switch (byte_at(input, 0) % 6) {
      case 0: {
        for (const double s : parse_speeds(text))
          require(std::isfinite(s) && s > 0.0, "parse_speeds returned a speed that is not finite and > 0");
        break;
      }
      case 1: {
        EmulationOptions options;
        parse_transient(text, options);
        require(options.transient_probability >= 0.0 && options.transient_probability <= 1.0 &&
                    std::isfinite(options.transient_factor) && options.transient_factor >= 1.0 &&
                    options.transient_steps >= 1,
                "parse_transient accepted an out-of-range value");
        break;
      }
      case 2: {
        const auto layers = parse_layers(text);
        require(layers.size() >= 2, "parse_layers returned fewer than two widths");
        for (const auto w : layers) require(w >= 1, "parse_layers returned a width < 1");
        break;
      }
      case 3:
        (void)parse_optimizer(text);
        break;
      case 4:
        (void)parse_device_preference(text);
        break;
      default:
        (void)log::parse_level(text);
        break;
    }
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    fail(std::string("a parser threw an antdt::Error that is not a UsageError: ") + e.what());
  }
}

}  // namespace antdt::fuzz
