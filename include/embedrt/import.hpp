// embedrt::import — turns PyTorch and safetensors checkpoints (files, shards, Hugging Face model
// folders with their config.json) into .embt files, without Python and without executing pickle
// code. A C++ program can call it to convert at load time; `embedrt convert` is a thin user.
//
//   auto checkpoint = embedrt::import::open_checkpoint({"path/to/hf-folder"});
//   auto plan = embedrt::import::plan_model(*checkpoint, {});   // recipe from config.json
//   auto report = embedrt::import::convert_model(*plan, "model.embt", {});
//
// Every parser here reads untrusted bytes: malformed input is refused with an error that names
// the file, tensor or field; nothing is executed, and a failed conversion leaves no output.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "embedrt/error.hpp"
#include "embedrt/format.hpp"
#include "embedrt/mapped_file.hpp"

namespace embedrt::import {

// ---- Tensors found in a checkpoint ----------------------------------------------------------

enum class SourceDType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kU16, kU32, kU64, kBool };

std::string_view source_dtype_name(SourceDType dtype) noexcept;  // torch names: "float32", ...
std::size_t source_dtype_size(SourceDType dtype) noexcept;
bool is_floating(SourceDType dtype) noexcept;

// A strided view of a storage that lives in a mapped input file.
struct SourceTensor {
  std::string name;
  SourceDType dtype = SourceDType::kF32;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;  // in elements
  std::int64_t storage_offset = 0;    // in elements
  std::span<const std::byte> storage;  // the whole storage the view reads from
  std::string origin;                  // file and record, for messages

  std::uint64_t numel() const noexcept;  // valid after validate_view()
};

// Checks that sizes, strides and offset are non-negative, that no product overflows, and that the
// furthest element the view can reach lies inside its storage.
Status validate_view(const SourceTensor& tensor);

std::string shape_string(const std::vector<std::int64_t>& dims);  // "[50257, 768]"

// ---- Opening checkpoints ----------------------------------------------------------------------

struct CheckpointOptions {
  bool check_crc = true;
  std::string key;  // keep only tensors under this dotted path, and strip it ("model")
  // config.json: by default the one in the model folder (or beside the first input file).
  std::string config_path;  // an explicit config.json
  bool ignore_config = false;  // plan from tensor names alone
};

struct Checkpoint {
  std::vector<SourceTensor> tensors;
  std::vector<std::string> files;    // every file read, in order
  std::vector<std::string> formats;  // "torch zip", "torch legacy", "safetensors", per file
  std::string config_path;           // the config.json read, or empty
  std::string config_json;           // its text
  std::vector<MappedFile> mappings;  // keep the tensors' bytes alive
};

// Inputs: .pt/.pth/.bin (torch zip or legacy), .safetensors, *.index.json, or a model folder.
Result<Checkpoint> open_checkpoint(const std::vector<std::string>& inputs, const CheckpointOptions& options = {});

// ---- Planning: which tensors are the tables, and how the family combines them ------------------

struct TableOverrides {
  std::string token, position, segment, norm_weight, norm_bias;  // exact tensor names
  std::optional<double> norm_epsilon;
};

struct PlanOptions {
  // "auto" (config.json, else tensor names when they fit one computation) or a recipe name
  // (recipe_names()); a recipe named here must agree with config.json's model_type.
  std::string preset = "auto";
  TableOverrides overrides;
  // Pooling defaults of the primary output (FORMAT.md 1.2), over what the recipe or config say:
  // a plain EmbeddingBag state dict needs `pooling` (sum or mean, as it was trained).
  std::optional<PoolingMode> pooling;
  std::optional<bool> normalize;
};

struct ChosenTable {
  Role role;
  const SourceTensor* tensor;
  const SourceTensor* projection = nullptr;  // folded in: rows become tensor @ projection^T
  // 0: a table of the primary output (found by its role); k > 0: the token table of
  // metadata.outputs[k - 1] (role other), which convert_model names in that output's rules.
  std::size_t output = 0;
  // What the table is for besides its role: an output's per-id pooling weights (written as an f32
  // [1, vocab] table, named in its pooling.weights rule) or its id map (an int32 [1, vocab] table,
  // named in its ids.map rule), each from a 1-D tensor with an entry per id.
  enum class Use { kRows, kPoolingWeights, kIdMap };
  Use use = Use::kRows;
};

// How token scales are rounded: to the table dtype (Gemma: transformers casts the scale to the
// weights' dtype) or to float32 (BART: a Python float multiplies the weights).
enum class ScaleRounding { kNone, kTableDType, kF32 };

// An output's token scale before rounding; metadata's token.scale is set by convert_model, which
// knows the table dtype.
struct PlannedScale {
  ScaleRounding rounding = ScaleRounding::kNone;
  double exact = 1.0;
};

struct ModelPlan {
  std::string family;       // the recipe's name, or "custom"
  std::string explanation;  // the evidence: config keys or tensor names, printed by the CLI
  std::vector<ChosenTable> tables;
  std::uint64_t sinusoidal_context = 0;  // > 0: generate a fixed sinusoidal position table
  SourceDType source_dtype = SourceDType::kF32;  // of the token table: the default table dtype
  std::vector<PlannedScale> token_scales = {{}};  // one per output: the primary, then metadata.outputs
  std::deque<SourceTensor> views;  // tensors seen another way (a 1-D weight vector as [rows, 1]); tables point here
  Metadata metadata;  // family, offsets, epsilon, context, other outputs, provenance (recipe.*, config.*)
};

// The names plan_model accepts as a preset, in the order of docs (gpt2, ..., clip).
std::vector<std::string> recipe_names();

Result<ModelPlan> plan_model(const Checkpoint& checkpoint, const PlanOptions& options = {});

// Adds a generated sinusoidal position table of `context` rows (the original Transformer's
// sin/cos at 10000^(2i/d)); refused when the plan already has a position table.
Status add_sinusoidal_positions(ModelPlan& plan, std::uint64_t context);

// ---- Converting ---------------------------------------------------------------------------------

struct ConvertOptions {
  // Table dtype for token, position and segment tables; LayerNorm stays f32. Default: the
  // checkpoint's own (bf16 stays bf16, f16 stays f16, f32 and f64 become f32).
  std::optional<DType> dtype;
  bool overwrite = false;
  bool sync = true;
  // A finite value past the table dtype's range (70000 in f16) is refused (kOutOfRange, naming
  // the tensor, row, column and value) unless this is set; then it is stored as infinity, as
  // torch's .to() would, and the report says the table is not exact.
  bool allow_overflow = false;
};

struct TableReport {
  std::string source_name;
  Role role;
  DType dtype;
  std::uint64_t rows, dim;
  bool exact;             // every value converted without rounding
  double max_abs_error;   // over all elements, against the source value
  double mean_abs_error;
  double rms_error;       // root mean square of the errors
};

// progress(bytes_done, bytes_total) is called every few megabytes.
using ProgressFn = std::function<void(std::uint64_t, std::uint64_t)>;

// The table dtype convert_model uses for this plan and options.
DType table_dtype(const ModelPlan& plan, const ConvertOptions& options) noexcept;

// Writes the planned tables into an .embt file, converting dtype on the way. Rows stream from
// the mapped input to the mapped output; nothing is held in memory whole.
Result<std::vector<TableReport>> convert_model(const ModelPlan& plan, const std::string& output,
                                               const ConvertOptions& options, const ProgressFn& progress = {});

}  // namespace embedrt::import
