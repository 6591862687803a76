// Private: a checkpoint blob (a magic, a format, then fields) whose fields are listed once.
//
// A saved structure lists its members once, in byte order, in a static `fields(m, f)` that
// calls f(member) per member (as the step messages do, src/protocol/step_messages.hpp);
// write_blob and read_blob both walk that list, so the two directions cannot drift. Members
// may be arithmetic values, strings, plans (core/plan_codec.hpp), structures with their own
// `fields`, and vectors of any of these (arithmetic vectors are copied whole). A vector's
// length is bounded by the bytes left, so corrupt bytes cannot ask for gigabytes. Checks of
// the values (ranges, consistency) belong to the caller, after read_blob.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "antdt/error.hpp"
#include "antdt/plan.hpp"
#include "core/bytes.hpp"
#include "core/plan_codec.hpp"

namespace antdt::detail {

namespace blob {

template <class T>
struct is_vector : std::false_type {};
template <class T>
struct is_vector<std::vector<T>> : std::true_type {};

template <class T>
concept Listed = requires(T& t) {
  T::fields(t, [](auto&) {});
};

// The fewest bytes one encoded T takes (its length prefix for a vector or a string).
template <class T>
std::size_t min_bytes() {
  if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T>) {
    return sizeof(T);
  } else if constexpr (is_vector<T>::value || std::is_same_v<T, std::string>) {
    return sizeof(std::uint64_t);
  } else if constexpr (std::is_same_v<T, Plan>) {
    return 3 * sizeof(std::int64_t) + 5 * sizeof(std::uint64_t) + 1;
  } else {
    static_assert(Listed<T>, "a blob field is arithmetic, a string, a plan, a listed structure or a vector");
    std::size_t n = 0;
    T probe{};
    T::fields(probe, [&](auto& member) { n += min_bytes<std::remove_cvref_t<decltype(member)>>(); });
    return n;
  }
}

struct Writer {
  ByteWriter& out;
  template <class T>
  void operator()(const T& v) const {
    if constexpr (std::is_same_v<T, bool>) {
      out.put<std::uint8_t>(v ? 1 : 0);
    } else if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T>) {
      out.put(v);
    } else if constexpr (std::is_same_v<T, std::string>) {
      out.put_string(v);
    } else if constexpr (std::is_same_v<T, Plan>) {
      encode_plan(v, out);
    } else if constexpr (is_vector<T>::value) {
      using E = typename T::value_type;
      if constexpr ((std::is_arithmetic_v<E> && !std::is_same_v<E, bool>) || std::is_same_v<E, std::byte>) {
        out.put_vector(v);
      } else {
        out.put<std::uint64_t>(v.size());
        for (const auto& e : v) (*this)(e);
      }
    } else {
      T::fields(v, *this);
    }
  }
};

struct Reader {
  ByteReader& in;
  template <class T>
  void operator()(T& v) const {
    if constexpr (std::is_same_v<T, bool>) {
      const auto b = in.get<std::uint8_t>();
      if (b > 1) throw Error("a flag byte is " + std::to_string(b) + ", not 0 or 1");
      v = b == 1;
    } else if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T>) {
      v = in.get<T>();
    } else if constexpr (std::is_same_v<T, std::string>) {
      v = in.get_string();
    } else if constexpr (std::is_same_v<T, Plan>) {
      v = decode_plan(in);
    } else if constexpr (is_vector<T>::value) {
      using E = typename T::value_type;
      if constexpr ((std::is_arithmetic_v<E> && !std::is_same_v<E, bool>) || std::is_same_v<E, std::byte>) {
        v = in.template get_vector<E>();
      } else {
        const auto n = in.get<std::uint64_t>();
        if (n > in.remaining() / min_bytes<E>())
          throw Error("a list of " + std::to_string(n) + " entries is longer than the bytes left");
        v.assign(static_cast<std::size_t>(n), E{});
        for (auto& e : v) (*this)(e);
      }
    } else {
      T::fields(v, *this);
    }
  }
};

}  // namespace blob

// magic, format, then every field of `value`.
template <class T>
std::vector<std::byte> write_blob(std::uint32_t magic, std::uint32_t format, const T& value) {
  ByteWriter w;
  w.put(magic);
  w.put(format);
  T::fields(value, blob::Writer{w});
  return w.take();
}

// Reads what write_blob wrote. CheckpointError, naming `what`, on another magic, another format
// (`older` says what to do with an older one), a short or malformed blob, or trailing bytes.
template <class T>
T read_blob(std::span<const std::byte> bytes, std::uint32_t magic, std::uint32_t format, const std::string& what,
            const std::string& older) {
  try {
    ByteReader r(bytes);
    if (r.get<std::uint32_t>() != magic) throw CheckpointError(what + ": not a " + what + " blob (bad magic)");
    const auto found = r.get<std::uint32_t>();
    if (found != format) {
      throw CheckpointError(what + ": format " + std::to_string(found) + ", but this build reads format " +
                            std::to_string(format) + (found < format ? "; " + older : std::string()));
    }
    T value{};
    T::fields(value, blob::Reader{r});
    if (!r.done()) throw CheckpointError(what + ": " + std::to_string(r.remaining()) + " trailing bytes");
    return value;
  } catch (const CheckpointError&) {
    throw;
  } catch (const Error& e) {
    throw CheckpointError(what + ": " + e.what());
  }
}

}  // namespace antdt::detail
