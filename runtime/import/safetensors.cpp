#include "safetensors.hpp"

#include "../checked_math.hpp"  // the project's one home of checked size arithmetic

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

namespace embedrt::import {
namespace {

std::optional<SourceDType> parse_dtype(const std::string& name) {
  static const std::pair<const char*, SourceDType> kTypes[] = {
      {"F64", SourceDType::kF64}, {"F32", SourceDType::kF32}, {"F16", SourceDType::kF16},
      {"BF16", SourceDType::kBF16}, {"I64", SourceDType::kI64}, {"I32", SourceDType::kI32},
      {"I16", SourceDType::kI16}, {"I8", SourceDType::kI8}, {"U8", SourceDType::kU8},
      {"U16", SourceDType::kU16}, {"U32", SourceDType::kU32}, {"U64", SourceDType::kU64},
      {"BOOL", SourceDType::kBool},
  };
  for (const auto& [n, d] : kTypes) {
    if (name == n) return d;
  }
  return std::nullopt;
}

}  // namespace

Result<std::vector<SourceTensor>> load_safetensors(std::span<const std::byte> file, const std::string& label) {
  const auto fail = [&label](const std::string& what) {
    return Error(ErrorCode::kMalformed, "'" + label + "': safetensors: " + what);
  };
  if (file.size() < 8) return fail("file is " + std::to_string(file.size()) + " bytes, shorter than the header length");
  std::uint64_t header_size = 0;
  std::memcpy(&header_size, file.data(), 8);
  if (header_size > kMaxSafetensorsHeader) {
    return fail("header length " + std::to_string(header_size) + " exceeds the 100 MB limit");
  }
  if (header_size > file.size() - 8) {
    return fail("header length " + std::to_string(header_size) + " is longer than the file");
  }
  const char* text = reinterpret_cast<const char*>(file.data() + 8);
  if (header_size == 0 || text[0] != '{') return fail("header does not start with '{'");

  // The parser callback sees every key; duplicates at the top level are refused (nlohmann would
  // silently keep the last one).
  std::set<std::string> seen;
  std::optional<std::string> duplicate;
  const nlohmann::json::parser_callback_t on_event = [&](int depth, nlohmann::json::parse_event_t event,
                                                         nlohmann::json& parsed) {
    if (depth > 8) throw std::out_of_range("header nests deeper than 8 levels");
    if (event == nlohmann::json::parse_event_t::key && depth == 1 && !seen.insert(parsed.get<std::string>()).second) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, text + header_size, on_event);
  } catch (const std::exception& e) {
    return fail(std::string("header is not valid JSON: ") + e.what());
  }
  if (duplicate) return fail("duplicate tensor name '" + *duplicate + "'");
  if (!header.is_object()) return fail("header is not a JSON object");

  const std::span<const std::byte> buffer = file.subspan(8 + header_size);
  std::vector<SourceTensor> tensors;
  struct Range {
    std::uint64_t begin, end;
    std::string name;
  };
  std::vector<Range> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) return fail("__metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) return fail("__metadata__ value of '" + k + "' is not a string");
      }
      continue;
    }
    const auto where = "tensor '" + name + "': ";
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets")) {
      return fail(where + "needs dtype, shape and data_offsets");
    }
    const auto& dtype_json = entry["dtype"];
    const auto& shape_json = entry["shape"];
    const auto& offsets_json = entry["data_offsets"];
    if (!dtype_json.is_string()) return fail(where + "dtype is not a string");
    const auto dtype = parse_dtype(dtype_json.get<std::string>());
    if (!dtype) return fail(where + "dtype '" + dtype_json.get<std::string>() + "' is not supported");
    if (!shape_json.is_array() || shape_json.size() > 64) return fail(where + "shape is not an array of at most 64 sizes");
    if (!offsets_json.is_array() || offsets_json.size() != 2 || !offsets_json[0].is_number_unsigned() ||
        !offsets_json[1].is_number_unsigned()) {
      return fail(where + "data_offsets is not [begin, end]");
    }
    SourceTensor t;
    t.name = name;
    t.dtype = *dtype;
    t.origin = "'" + label + "'";
    // Sizes come from the file: every product is checked (byte_io.hpp), and the element count
    // must fit int64 so that the row-major strides below (products of trailing sizes) do too.
    std::optional<std::uint64_t> numel = 1;
    for (const auto& d : shape_json) {
      if (!d.is_number_unsigned()) return fail(where + "shape holds a value that is not a non-negative integer");
      const auto size = d.get<std::uint64_t>();
      numel = detail::checked_mul(*numel, size);
      if (size > static_cast<std::uint64_t>(INT64_MAX) || !numel || *numel > static_cast<std::uint64_t>(INT64_MAX)) {
        return fail(where + "shape " + shape_json.dump() + " holds more elements than a tensor can (2^63 - 1)");
      }
      t.shape.push_back(static_cast<std::int64_t>(size));
    }
    // Row-major strides: each is a product of trailing sizes (zero sizes count as one), so none
    // exceeds the element count when it is nonzero; checked anyway, as the count may be zero.
    t.strides.assign(t.shape.size(), 1);
    for (std::size_t i = t.shape.size(); i-- > 1;) {
      const auto stride = detail::checked_mul(static_cast<std::uint64_t>(t.strides[i]),
                                              static_cast<std::uint64_t>(std::max<std::int64_t>(t.shape[i], 1)));
      if (!stride || *stride > static_cast<std::uint64_t>(INT64_MAX)) {
        return fail(where + "shape " + shape_json.dump() + " has strides past 2^63 - 1");
      }
      t.strides[i - 1] = static_cast<std::int64_t>(*stride);
    }
    const auto begin = offsets_json[0].get<std::uint64_t>(), end = offsets_json[1].get<std::uint64_t>();
    const std::optional<std::uint64_t> byte_count = detail::checked_mul(*numel, source_dtype_size(*dtype));
    if (!byte_count) return fail(where + "shape " + shape_json.dump() + " holds more bytes than 2^64 - 1");
    const std::uint64_t bytes = *byte_count;
    if (end < begin || end - begin != bytes) {
      return fail(where + "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + ") hold " +
                  std::to_string(end >= begin ? end - begin : 0) + " bytes, shape " + shape_string(t.shape) + " of " +
                  std::string(source_dtype_name(*dtype)) + " needs " + std::to_string(bytes));
    }
    if (end > buffer.size()) {
      return fail(where + "data_offsets end " + std::to_string(end) + " is past the data buffer (" +
                  std::to_string(buffer.size()) + " bytes)");
    }
    t.storage = buffer.subspan(begin, bytes);
    ranges.push_back({begin, end, name});
    tensors.push_back(std::move(t));
  }
  // The ranges must tile the buffer from 0 with no gap, overlap, or trailing bytes.
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t cursor = 0;
  for (const Range& r : ranges) {
    if (r.begin != cursor) {
      return fail("tensor '" + r.name + "' starts at " + std::to_string(r.begin) + ", expected " +
                  std::to_string(cursor) + (r.begin < cursor ? " (overlap)" : " (gap)"));
    }
    cursor = r.end;
  }
  if (cursor != buffer.size()) {
    return fail("tensors cover " + std::to_string(cursor) + " bytes of a " + std::to_string(buffer.size()) +
                "-byte data buffer (the file length must match exactly)");
  }
  return tensors;
}

}  // namespace embedrt::import
