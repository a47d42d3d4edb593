// libFuzzer target: config.json (hostile text) through the recipe planner, against a fixed
// checkpoint whose tensor names fit many families, so every recipe's config look-ups and
// consistency checks run on arbitrary values.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "embedrt/import.hpp"

namespace {

embedrt::import::Checkpoint fixed_checkpoint() {
  static std::vector<std::byte> storage(8 * 4 * 8);
  embedrt::import::Checkpoint c;
  const auto add = [&](std::string name, std::vector<std::int64_t> shape) {
    embedrt::import::SourceTensor t;
    t.name = std::move(name);
    t.shape = shape;
    t.strides = shape.size() == 2 ? std::vector<std::int64_t>{shape[1], 1} : std::vector<std::int64_t>{1};
    t.storage = storage;
    c.tensors.push_back(std::move(t));
  };
  for (const char* name : {"model.embed_tokens.weight", "transformer.wte.weight", "transformer.wpe.weight",
                           "embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight",
                           "embeddings.token_type_embeddings.weight", "model.decoder.embed_tokens.weight",
                           "model.decoder.embed_positions.weight", "model.encoder.embed_positions.weight",
                           "shared.weight", "model.decoder.project_in.weight"}) {
    add(name, {8, 4});
  }
  for (const char* name : {"embeddings.LayerNorm.weight", "embeddings.LayerNorm.bias", "model.encoder.layernorm_embedding.weight"}) {
    add(name, {4});
  }
  c.config_path = "fuzz/config.json";
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static embedrt::import::Checkpoint checkpoint = fixed_checkpoint();
  checkpoint.config_json.assign(reinterpret_cast<const char*>(data), size);
  if (checkpoint.config_json.empty()) return 0;  // empty text means "no config"
  auto plan = embedrt::import::plan_model(checkpoint);
  if (plan) {
    volatile std::size_t n = plan->tables.size() + plan->metadata.extra.size();
    (void)n;
  }
  return 0;
}
