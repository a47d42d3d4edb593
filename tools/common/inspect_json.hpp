// The JSON documents `embedrt inspect --json` prints, built in one place so that the CLI and the
// Python module (embedrt.inspect, Model.metadata) describe files identically.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "embedrt/error.hpp"
#include "embedrt/format.hpp"
#include "embedrt/import.hpp"
#include "embedrt/table_file.hpp"

namespace embedrt::describe {

// Every metadata key of the file, typed keys first, then the others as read.
nlohmann::ordered_json metadata_json(const Metadata& metadata);
// The outputs and their rules: the primary one, then each other output with its outputs.N.* keys.
nlohmann::ordered_json outputs_json(const Metadata& metadata);

// An .embt file: path, format version, size, metadata and every table.
nlohmann::ordered_json table_file_json(const TableFile& file);

// A checkpoint: its files and formats, the recipe convert would use (or why none fits), and
// every tensor.
nlohmann::ordered_json checkpoint_json(const import::Checkpoint& checkpoint, const Result<import::ModelPlan>& plan);

// True unless the path is a regular file that does not start with the .embt magic: what is not
// an .embt file is described as a checkpoint.
bool looks_like_embt(const std::string& path);

// `embedrt inspect --json PATH`: the document of an .embt file or of a checkpoint.
Result<nlohmann::ordered_json> inspect_json(const std::string& path);

}  // namespace embedrt::describe
