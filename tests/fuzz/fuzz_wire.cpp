// Fuzz target wire: the control-message decoders. Byte 0 picks the decoder (decode_grants,
// then a Client fed with the grants; decode_plan); the rest is the message. A message that
// decodes must encode back to the bytes the decoder consumed.
#include <vector>

#include "antdt/dds.hpp"
#include "core/bytes.hpp"
#include "core/plan_codec.hpp"
#include "dds/wire.hpp"
#include "fuzz_target.hpp"

namespace antdt::fuzz {

namespace {

void require_prefix(const std::vector<std::byte>& encoded, std::span<const std::byte> message, const char* what) {
  require(encoded.size() <= message.size() && std::equal(encoded.begin(), encoded.end(), message.begin()), what);
}

}  // namespace

void run(std::span<const std::byte> input) {
  if (input.empty()) return;
  const auto message = input.subspan(1);
  detail::ByteReader in(message);
  detail::ByteWriter out;
  switch (byte_at(input, 0) % 2) {
    case 0: {
      const auto grants = dds::decode_grants(in);
      dds::encode_grants(grants, out);
      require_prefix(out.bytes(), message, "encode_grants(decode_grants(x)) is not a prefix of x");
      // What a rank does with a reply: keep its own grants and take sample indices from them.
      dds::LedgerOptions options;
      options.dataset_size = 1000;
      options.shard_size = 10;
      dds::Client client(options);
      client.add(grants, 0);
      (void)client.take(16);
      break;
    }
    default: {
      const Plan plan = decode_plan(in);
      encode_plan(plan, out);
      require_prefix(out.bytes(), message, "encode_plan(decode_plan(x)) is not a prefix of x");
      break;
    }
  }
}

}  // namespace antdt::fuzz
