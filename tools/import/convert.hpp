// Writes the tables a ModelPlan chose into an .embt file, converting dtype on the way. Rows
// stream from the mapped input to the mapped output; nothing is held in memory whole.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "embedrt/error.hpp"
#include "embedrt/format.hpp"
#include "presets.hpp"

namespace embedrt::import {

struct ConvertOptions {
  DType dtype = DType::kF32;  // for token, position and segment tables; LayerNorm stays f32
  bool overwrite = false;
  bool sync = true;
};

struct TableReport {
  std::string source_name;
  Role role;
  DType dtype;
  std::uint64_t rows, dim;
  bool exact;             // every value converted without rounding
  double max_abs_error;   // over all elements, against the source value
  double mean_abs_error;
};

// progress(bytes_done, bytes_total) is called every few megabytes.
using ProgressFn = std::function<void(std::uint64_t, std::uint64_t)>;

Result<std::vector<TableReport>> convert_model(const ModelPlan& plan, const std::string& output,
                                               const ConvertOptions& options, const ProgressFn& progress = {});

}  // namespace embedrt::import
