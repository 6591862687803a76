// Private: the DDS grant list on the wire (control replies and the Session's control
// message). Field by field, so struct padding never travels.
#pragma once

#include <vector>

#include "core/bytes.hpp"
#include "dds/dds.hpp"

namespace antdt::dds {

// Bytes per grant on the wire.
inline constexpr std::size_t kGrantWireBytes = 4 * sizeof(std::int64_t) + sizeof(std::int32_t);

void encode_grants(const std::vector<Grant>& grants, antdt::detail::ByteWriter& out);
// Throws antdt::Error on a short or malformed buffer.
std::vector<Grant> decode_grants(antdt::detail::ByteReader& in);

}  // namespace antdt::dds
