// The C API: a thin, exception-proof layer over the C++ API.
#include "embedrt/embedrt.h"

#include <new>
#include <optional>
#include <string>
#include <vector>

#include "embedrt/embedder.hpp"
#include "embedrt/fault_guard.hpp"
#include "embedrt/model.hpp"
#include "embedrt/version.hpp"

struct embedrt_error {
  embedrt_status code;
  std::string message;
};
struct embedrt_model {
  embedrt::Model model;
};
struct embedrt_embedder {
  embedrt::Embedder embedder;
};

namespace {

static_assert(EMBEDRT_UNSUPPORTED == static_cast<int>(embedrt::ErrorCode::kUnsupported) &&
                  EMBEDRT_MALFORMED == static_cast<int>(embedrt::ErrorCode::kMalformed),
              "embedrt_status mirrors embedrt::ErrorCode");

embedrt_status fail(embedrt_error** error, embedrt_status code, std::string message) noexcept {
  if (error != nullptr) {
    *error = new (std::nothrow) embedrt_error{code, std::string()};
    if (*error != nullptr) {
      try {
        (*error)->message = std::move(message);
      } catch (...) {
      }
    }
  }
  return code;
}

embedrt_status fail(embedrt_error** error, const embedrt::Error& e) noexcept {
  return fail(error, static_cast<embedrt_status>(e.code()), e.message());
}

// Runs `body`, turning any exception (allocation failure) into EMBEDRT_INTERNAL.
template <typename Body>
embedrt_status guarded(embedrt_error** error, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(error, EMBEDRT_INTERNAL, "out of memory");
  } catch (const std::exception& e) {
    return fail(error, EMBEDRT_INTERNAL, e.what());
  } catch (...) {
    return fail(error, EMBEDRT_INTERNAL, "unknown failure");
  }
}

embedrt::IdSpan id_span(const void* ids, std::size_t n, int is_int64) {
  if (is_int64) return std::span(static_cast<const std::int64_t*>(ids), n);
  return std::span(static_cast<const std::int32_t*>(ids), n);
}

// A caller's buffer as an OutputSpan: the dtype is an int a C caller may fill with anything.
embedrt::Result<embedrt::OutputSpan> output_span(void* out, std::size_t out_bytes, int out_dtype) {
  if (out == nullptr && out_bytes > 0) return embedrt::Error(embedrt::ErrorCode::kInvalidArgument, "out must not be NULL");
  if (out_dtype != EMBEDRT_OUT_F32 && out_dtype != EMBEDRT_OUT_BF16 && out_dtype != EMBEDRT_OUT_F16) {
    return embedrt::Error(embedrt::ErrorCode::kInvalidArgument, "unknown output dtype " + std::to_string(out_dtype));
  }
  const auto dtype = out_dtype == EMBEDRT_OUT_F32    ? embedrt::OutputDType::kF32
                     : out_dtype == EMBEDRT_OUT_BF16 ? embedrt::OutputDType::kBF16
                                                     : embedrt::OutputDType::kF16;
  return embedrt::OutputSpan::from_bytes({static_cast<std::byte*>(out), out_bytes}, dtype);
}

}  // namespace

extern "C" {

const char* embedrt_version(void) { return embedrt::version(); }

embedrt_status embedrt_error_code(const embedrt_error* error) { return error ? error->code : EMBEDRT_OK; }
const char* embedrt_error_message(const embedrt_error* error) { return error ? error->message.c_str() : ""; }
void embedrt_error_free(embedrt_error* error) { delete error; }

embedrt_status embedrt_model_open(const char* path, embedrt_model** model, embedrt_error** error) {
  return embedrt_model_open_with(path, EMBEDRT_RESIDENCY_MMAP, 0, model, error);
}

embedrt_status embedrt_model_open_with(const char* path, int residency, int lock_in_memory, embedrt_model** model,
                                       embedrt_error** error) {
  return guarded(error, [&]() -> embedrt_status {
    if (path == nullptr || model == nullptr) return fail(error, EMBEDRT_INVALID_ARGUMENT, "path and model must not be NULL");
    *model = nullptr;
    embedrt::OpenOptions options;
    switch (residency) {
      case EMBEDRT_RESIDENCY_MMAP: options.residency = embedrt::Residency::kMmap; break;
      case EMBEDRT_RESIDENCY_POPULATE: options.residency = embedrt::Residency::kPopulate; break;
      case EMBEDRT_RESIDENCY_COPY: options.residency = embedrt::Residency::kCopy; break;
      default:
        return fail(error, EMBEDRT_INVALID_ARGUMENT,
                    "residency value " + std::to_string(residency) +
                        " is not EMBEDRT_RESIDENCY_MMAP (0), EMBEDRT_RESIDENCY_POPULATE (1) or EMBEDRT_RESIDENCY_COPY (2)");
    }
    options.lock_in_memory = lock_in_memory != 0;
    auto opened = embedrt::Model::open(path, options);
    if (!opened) return fail(error, opened.error());
    *model = new embedrt_model{std::move(*opened)};
    return EMBEDRT_OK;
  });
}

embedrt_status embedrt_install_fault_guard(embedrt_error** error) {
  return guarded(error, [&]() -> embedrt_status {
    if (embedrt::Status s = embedrt::install_fault_guard(); !s) return fail(error, s.error());
    return EMBEDRT_OK;
  });
}

void embedrt_model_free(embedrt_model* model) { delete model; }
uint64_t embedrt_model_dim(const embedrt_model* model) { return model ? model->model.dim() : 0; }
uint64_t embedrt_model_vocab_size(const embedrt_model* model) { return model ? model->model.vocab_size() : 0; }

size_t embedrt_model_output_count(const embedrt_model* model) { return model ? model->model.outputs().size() : 0; }

const char* embedrt_model_output_name(const embedrt_model* model, size_t output) {
  if (model == nullptr || output >= model->model.outputs().size()) return nullptr;
  return model->model.outputs()[output].name.c_str();
}

uint64_t embedrt_model_output_dim(const embedrt_model* model, size_t output) {
  if (model == nullptr || output >= model->model.outputs().size()) return 0;
  return model->model.outputs()[output].dim();
}

size_t embedrt_model_output_shape(const embedrt_model* model, size_t output, uint64_t* shape, size_t capacity) {
  if (model == nullptr || output >= model->model.outputs().size()) return 0;
  const auto& dims = model->model.outputs()[output].token_shape;
  for (size_t i = 0; shape != nullptr && i < dims.size() && i < capacity; ++i) shape[i] = dims[i];
  return dims.size();
}

embedrt_status embedrt_model_verify(const embedrt_model* model, embedrt_error** error) {
  return guarded(error, [&]() -> embedrt_status {
    if (model == nullptr) return fail(error, EMBEDRT_INVALID_ARGUMENT, "model must not be NULL");
    if (embedrt::Status s = model->model.file().verify(); !s) return fail(error, s.error());
    return EMBEDRT_OK;
  });
}

embedrt_status embedrt_embedder_create(const embedrt_model* model, const char* isa, embedrt_embedder** embedder,
                                       embedrt_error** error) {
  embedrt_embedder_options options{};
  options.isa = isa;
  return embedrt_embedder_create_with(model, &options, embedder, error);
}

embedrt_status embedrt_embedder_create_with(const embedrt_model* model, const embedrt_embedder_options* asked,
                                            embedrt_embedder** embedder, embedrt_error** error) {
  return guarded(error, [&]() -> embedrt_status {
    if (model == nullptr || embedder == nullptr) return fail(error, EMBEDRT_INVALID_ARGUMENT, "model and embedder must not be NULL");
    *embedder = nullptr;
    const embedrt_embedder_options defaults{};
    const embedrt_embedder_options& o = asked != nullptr ? *asked : defaults;
    embedrt::EmbedderOptions options;
    if (o.isa != nullptr) {
      options.isa = embedrt::parse_isa(o.isa);
      if (!options.isa) return fail(error, EMBEDRT_INVALID_ARGUMENT, std::string("unknown ISA '") + o.isa + "'");
    }
    switch (o.prefetch_level) {
      case EMBEDRT_PREFETCH_AUTO: options.prefetch_level = embedrt::PrefetchLevel::kAuto; break;
      case EMBEDRT_PREFETCH_L1: options.prefetch_level = embedrt::PrefetchLevel::kL1; break;
      case EMBEDRT_PREFETCH_L2: options.prefetch_level = embedrt::PrefetchLevel::kL2; break;
      default:
        return fail(error, EMBEDRT_INVALID_ARGUMENT,
                    "prefetch level value " + std::to_string(o.prefetch_level) + " is not EMBEDRT_PREFETCH_AUTO, _L1 or _L2");
    }
    switch (o.nontemporal) {
      case EMBEDRT_NONTEMPORAL_AUTO: options.nontemporal = embedrt::NonTemporal::kAuto; break;
      case EMBEDRT_NONTEMPORAL_ALWAYS: options.nontemporal = embedrt::NonTemporal::kAlways; break;
      case EMBEDRT_NONTEMPORAL_NEVER: options.nontemporal = embedrt::NonTemporal::kNever; break;
      default:
        return fail(error, EMBEDRT_INVALID_ARGUMENT,
                    "nontemporal value " + std::to_string(o.nontemporal) +
                        " is not EMBEDRT_NONTEMPORAL_AUTO, _ALWAYS or _NEVER");
    }
    if (o.cache_bytes != 0) options.cache_bytes = o.cache_bytes;
    if (o.min_rows_ahead != 0) options.min_rows_ahead = o.min_rows_ahead;  // Embedder::create checks its range
    for (const uint64_t r : o.reserved) {
      if (r != 0) {
        return fail(error, EMBEDRT_INVALID_ARGUMENT,
                    "embedrt_embedder_options.reserved must be zero (an option this library does not know)");
      }
    }
    auto created = embedrt::Embedder::create(model->model, options);
    if (!created) return fail(error, created.error());
    *embedder = new embedrt_embedder{std::move(*created)};
    return EMBEDRT_OK;
  });
}

void embedrt_embedder_free(embedrt_embedder* embedder) { delete embedder; }

const char* embedrt_embedder_isa(const embedrt_embedder* embedder) {
  return embedder ? embedrt::isa_name(embedder->embedder.isa()).data() : "";
}

const char* embedrt_embedder_prefetch_level(const embedrt_embedder* embedder, size_t output) {
  if (embedder == nullptr || output >= embedder->embedder.model().outputs().size()) return "";
  return embedrt::prefetch_level_name(embedder->embedder.prefetch_level(output)).data();
}

uint64_t embedrt_embedder_min_rows_ahead(const embedrt_embedder* embedder, size_t output) {
  if (embedder == nullptr || output >= embedder->embedder.model().outputs().size()) return 0;
  return embedder->embedder.min_rows_ahead(output);
}

embedrt_status embedrt_embed(const embedrt_embedder* embedder, const embedrt_request* request, void* out,
                             size_t out_bytes, int out_dtype, embedrt_error** error) {
  const embedrt_output_target target{0, out, out_bytes, out_dtype};
  return embedrt_embed_outputs(embedder, request, &target, 1, error);
}

embedrt_status embedrt_embed_outputs(const embedrt_embedder* embedder, const embedrt_request* request,
                                     const embedrt_output_target* targets, size_t num_targets, embedrt_error** error) {
  return guarded(error, [&]() -> embedrt_status {
    if (embedder == nullptr || request == nullptr || (targets == nullptr && num_targets > 0) ||
        (request->ids == nullptr && request->num_ids > 0)) {
      return fail(error, EMBEDRT_INVALID_ARGUMENT, "embedder, request, ids and out must not be NULL");
    }
    const std::size_t n = request->num_ids;
    embedrt::EmbedRequest r;
    r.ids = id_span(request->ids, n, request->ids_are_int64);
    r.sequences = request->sequences;
    if (request->sequence_offsets) r.sequence_offsets = {request->sequence_offsets, request->sequences + 1};
    if (request->position_ids) r.position_ids = std::span(request->position_ids, n);
    if (request->start_positions) r.start_positions = {request->start_positions, request->sequences};
    r.start = request->start;
    if (request->segment_ids) r.segment_ids = std::span(request->segment_ids, n);
    std::vector<embedrt::OutputTarget> outputs;
    outputs.reserve(num_targets);
    for (size_t k = 0; k < num_targets; ++k) {
      const embedrt_output_target& t = targets[k];
      auto span = output_span(t.out, t.out_bytes, t.out_dtype);
      if (!span) return fail(error, span.error());
      outputs.push_back({t.output, *span});
    }
    const embedrt::Status s = embedder->embedder.embed(r, outputs);
    if (!s) return fail(error, s.error());
    return EMBEDRT_OK;
  });
}

embedrt_status embedrt_pool(const embedrt_embedder* embedder, const embedrt_bag_request* request, size_t output,
                            void* out, size_t out_bytes, int out_dtype, embedrt_error** error) {
  return guarded(error, [&]() -> embedrt_status {
    if (embedder == nullptr || request == nullptr || (request->ids == nullptr && request->num_ids > 0)) {
      return fail(error, EMBEDRT_INVALID_ARGUMENT, "embedder, request and ids must not be NULL");
    }
    const std::size_t n = request->num_ids;
    embedrt::BagRequest r;
    r.ids = id_span(request->ids, n, request->ids_are_int64);
    if (request->offsets != nullptr) r.offsets = {request->offsets, request->bags + 1};
    r.bags = request->bags;
    if (request->weights != nullptr) r.weights = {request->weights, n};
    switch (request->mode) {
      case EMBEDRT_POOL_DEFAULT: break;
      case EMBEDRT_POOL_SUM: r.mode = embedrt::PoolingMode::kSum; break;
      case EMBEDRT_POOL_MEAN: r.mode = embedrt::PoolingMode::kMean; break;
      case EMBEDRT_POOL_MAX: r.mode = embedrt::PoolingMode::kMax; break;
      default: return fail(error, EMBEDRT_INVALID_ARGUMENT, "unknown pooling mode " + std::to_string(request->mode));
    }
    if (request->normalize < -1 || request->normalize > 1) {
      return fail(error, EMBEDRT_INVALID_ARGUMENT, "normalize is " + std::to_string(request->normalize) + ", expected -1, 0 or 1");
    }
    if (request->normalize >= 0) r.normalize = request->normalize == 1;
    auto span = output_span(out, out_bytes, out_dtype);
    if (!span) return fail(error, span.error());
    const embedrt::Status s = embedder->embedder.pool(r, *span, output);
    if (!s) return fail(error, s.error());
    return EMBEDRT_OK;
  });
}

embedrt_status embedrt_prefetch(const embedrt_embedder* embedder, const void* ids, size_t num_ids, int ids_are_int64,
                                int page_in, embedrt_error** error) {
  return guarded(error, [&]() -> embedrt_status {
    if (embedder == nullptr || (ids == nullptr && num_ids > 0)) {
      return fail(error, EMBEDRT_INVALID_ARGUMENT, "embedder and ids must not be NULL");
    }
    const embedrt::Status s = embedder->embedder.prefetch(
        id_span(ids, num_ids, ids_are_int64), {},
        page_in ? embedrt::PrefetchTarget::kMemory : embedrt::PrefetchTarget::kCache);
    if (!s) return fail(error, s.error());
    return EMBEDRT_OK;
  });
}

}  // extern "C"
