// A downstream program that converts at load time: a Hugging Face folder to .embt through
// embedrt::import, then embeds with the result.
#include <embedrt/embedder.hpp>
#include <embedrt/embedrt.hpp>
#include <embedrt/import.hpp>

#include <cstdio>
#include <string>
#include <variant>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const auto fail = [](const embedrt::Error& e) {
    std::fprintf(stderr, "%s\n", e.message().c_str());
    return 1;
  };
  auto checkpoint = embedrt::import::open_checkpoint({argv[1]});
  if (!checkpoint) return fail(checkpoint.error());
  auto plan = embedrt::import::plan_model(*checkpoint);
  if (!plan) return fail(plan.error());
  auto report = embedrt::import::convert_model(*plan, argv[2], {.overwrite = true, .sync = false});
  if (!report) return fail(report.error());
  auto model = embedrt::Model::open(argv[2]);
  if (!model) return fail(model.error());
  auto embedder = embedrt::Embedder::create(*model);
  if (!embedder) return fail(embedder.error());
  const std::vector<std::int64_t> ids = {0, 1, 2};
  embedrt::EmbedRequest request;
  request.ids = ids;
  std::vector<float> out(ids.size() * model->dim());
  if (auto s = embedder->embed(request, embedrt::OutputSpan(out)); !s) return fail(s.error());
  const auto recipe = model->metadata().extra.find("recipe.name");
  const bool ok = recipe != model->metadata().extra.end() && std::get<std::string>(recipe->second) == plan->family;
  std::printf("converted %s with recipe %s: %s\n", argv[1], plan->family.c_str(), ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
