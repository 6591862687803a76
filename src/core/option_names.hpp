// Private: the name of an option in a message, in the style the program chose
// (antdt::set_option_names): every option has one key, its long flag name without dashes.
#pragma once

#include <string>
#include <string_view>

namespace antdt::detail {

// "--emulate-speed", "emulate_speed" or "JobOptions::session.emulation.speeds". A key with no
// field in the table is named by its flag in every style but keywords.
[[nodiscard]] std::string option_name(std::string_view key);

}  // namespace antdt::detail
