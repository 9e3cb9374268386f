// The argument checks of every compiled operator: TSRNN_CHECK(cond, parts...) raises torch's
// c10::Error (a RuntimeError in Python) with the message of its parts, built as one std::string by
// appending each part (text, integers with std::to_string, sizes as [a, b, c], devices, dtypes),
// only when the check fails. No C++ stream or locale is involved: TORCH_CHECK's own variadic form
// formats numbers through std::ostringstream, and on the lent GPU machine every such message that
// held a number crashed the process (bench/RESULTS.md); a single std::string is handed to
// TORCH_CHECK as it is.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Exception.h>

#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace tsrnn {

inline void append(std::string& out, std::string_view text) { out.append(text.data(), text.size()); }
inline void append(std::string& out, const char* text) { out.append(text); }
inline void append(std::string& out, const std::string& text) { out.append(text); }
inline void append(std::string& out, const c10::Device& device) { out.append(device.str()); }
inline void append(std::string& out, c10::ScalarType dtype) { out.append(c10::toString(dtype)); }

template <typename Int, std::enable_if_t<std::is_integral_v<Int> && !std::is_same_v<Int, bool>, int> = 0>
void append(std::string& out, Int value) {
  out.append(std::to_string(value));
}

inline void append(std::string& out, c10::IntArrayRef sizes) {  // [a, b, c], as torch prints sizes
  out.push_back('[');
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i) out.append(", ");
    out.append(std::to_string(sizes[i]));
  }
  out.push_back(']');
}

// The parts joined by `delimiter` (in place of c10::Join, which writes to a stream).
inline std::string join(std::string_view delimiter, const std::vector<std::string>& parts) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) append(out, delimiter);
    out.append(parts[i]);
  }
  return out;
}

template <typename... Parts>
std::string message(const Parts&... parts) {
  std::string out;
  (append(out, parts), ...);
  return out;
}

}  // namespace tsrnn

// TORCH_CHECK with its message built by tsrnn::message (only evaluated when `cond` fails).
#define TSRNN_CHECK(cond, ...) TORCH_CHECK(cond, ::tsrnn::message(__VA_ARGS__))
