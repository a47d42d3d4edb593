// A downstream program: writes a tiny model, embeds a batch with it, checks the result.
#include <embedrt/embedder.hpp>
#include <embedrt/embedrt.hpp>

#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string path = argv[1];
  std::vector<float> tok = {0, 1, 10, 11, 20, 21}, pos = {100, 200, 300, 400};
  const embedrt::TableData tables[] = {
      {{"tok", embedrt::Role::kToken, embedrt::DType::kF32, 3, 2}, std::as_bytes(std::span(tok))},
      {{"pos", embedrt::Role::kPosition, embedrt::DType::kF32, 2, 2}, std::as_bytes(std::span(pos))},
  };
  embedrt::Metadata meta;
  meta.position_kind = embedrt::PositionKind::kLearned;
  if (auto s = embedrt::write_table_file(path, tables, meta, {.overwrite = true}); !s) {
    std::fprintf(stderr, "%s\n", s.error().message().c_str());
    return 1;
  }
  auto model = embedrt::Model::open(path);
  if (!model) {
    std::fprintf(stderr, "%s\n", model.error().message().c_str());
    return 1;
  }
  auto embedder = embedrt::Embedder::create(*model);
  if (!embedder) {
    std::fprintf(stderr, "%s\n", embedder.error().message().c_str());
    return 1;
  }
  // Two sequences of two tokens: ids {2, 0} and {1, 2}.
  const std::vector<std::int64_t> ids = {2, 0, 1, 2};
  embedrt::EmbedRequest request;
  request.ids = ids;
  request.sequences = 2;
  std::vector<float> out(ids.size() * 2);
  if (auto s = embedder->embed(request, embedrt::OutputSpan(out)); !s) {
    std::fprintf(stderr, "%s\n", s.error().message().c_str());
    return 1;
  }
  const std::vector<float> expected = {120, 221, 300, 401, 110, 211, 320, 421};
  std::printf("embedrt %s (isa %s): %s\n", embedrt::version(), std::string(embedrt::isa_name(embedder->isa())).c_str(),
              out == expected ? "ok" : "WRONG");
  return out == expected ? 0 : 1;
}
