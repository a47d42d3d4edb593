/* The embedrt C API: opaque handles, a status code from every call and, on failure, an error
 * object with a message naming the offending value. No C++ exception ever crosses this boundary.
 * Validation is the same as the C++ API's (it is a thin layer over it).
 *
 * Thread safety: models and embedders are immutable; embedrt_embed() may be called from any
 * number of threads at once on one embedder. Error objects belong to the caller.
 *
 *   embedrt_error* error = NULL;
 *   embedrt_model* model = NULL;
 *   if (embedrt_model_open("gpt2.embt", &model, &error) != EMBEDRT_OK) {
 *     fprintf(stderr, "%s\n", embedrt_error_message(error));
 *     embedrt_error_free(error);
 *   }
 */
#ifndef EMBEDRT_EMBEDRT_H
#define EMBEDRT_EMBEDRT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum embedrt_status {
  EMBEDRT_OK = 0,
  EMBEDRT_IO = 1,
  EMBEDRT_NO_SPACE = 2,
  EMBEDRT_ALREADY_EXISTS = 3,
  EMBEDRT_NOT_FOUND = 4,
  EMBEDRT_BAD_MAGIC = 5,
  EMBEDRT_UNSUPPORTED_VERSION = 6,
  EMBEDRT_MALFORMED = 7,
  EMBEDRT_CHECKSUM_MISMATCH = 8,
  EMBEDRT_INVALID_ARGUMENT = 9,
  EMBEDRT_OUT_OF_RANGE = 10,
  EMBEDRT_UNSUPPORTED = 11,
  EMBEDRT_INTERNAL = 100 /* out of memory or another failure inside the library */
} embedrt_status;

typedef enum embedrt_output_dtype { EMBEDRT_OUT_F32 = 0, EMBEDRT_OUT_BF16 = 1, EMBEDRT_OUT_F16 = 2 } embedrt_output_dtype;

typedef struct embedrt_error embedrt_error;
typedef struct embedrt_model embedrt_model;
typedef struct embedrt_embedder embedrt_embedder;

/* One request: `num_ids` ids (int32 or int64) forming `sequences` sequences of equal length, or
 * ragged ones when `sequence_offsets` (sequences + 1 values) is set. Positions come from
 * `position_ids` (one per id) if set, else `start_positions` (one per sequence) if set, else
 * `start`. `segment_ids` (one per id) may be NULL. Unused pointers must be NULL. */
typedef struct embedrt_request {
  const void* ids;
  size_t num_ids;
  int ids_are_int64;
  size_t sequences;
  const uint64_t* sequence_offsets;
  const int64_t* position_ids;
  const uint64_t* start_positions;
  uint64_t start;
  const int64_t* segment_ids;
} embedrt_request;

const char* embedrt_version(void);

/* Errors. Every function taking `embedrt_error** error` stores a new error object there on
 * failure when `error` is not NULL; free it with embedrt_error_free. */
embedrt_status embedrt_error_code(const embedrt_error* error);
const char* embedrt_error_message(const embedrt_error* error);
void embedrt_error_free(embedrt_error* error);

typedef enum embedrt_residency {
  EMBEDRT_RESIDENCY_MMAP = 0,     /* shared mapping, faulted in lazily (embedrt_model_open's) */
  EMBEDRT_RESIDENCY_POPULATE = 1, /* shared mapping, every page read at open */
  EMBEDRT_RESIDENCY_COPY = 2      /* private copy in huge pages, immune to the file changing */
} embedrt_residency;

embedrt_status embedrt_model_open(const char* path, embedrt_model** model, embedrt_error** error);
/* As embedrt_model_open, holding the bytes as `residency` says (an embedrt_residency value; an
 * int, so that any value is well defined and an unknown one is refused with
 * EMBEDRT_INVALID_ARGUMENT); `lock_in_memory` nonzero mlocks them (refused past RLIMIT_MEMLOCK).
 * See embedrt::Residency in embedrt/table_file.hpp. */
embedrt_status embedrt_model_open_with(const char* path, int residency, int lock_in_memory, embedrt_model** model,
                                       embedrt_error** error);

/* Turns SIGBUS from a model file truncated under its mapping into an error of the call that read
 * it (embedrt/fault_guard.hpp). Opt-in, process-wide, idempotent. */
embedrt_status embedrt_install_fault_guard(embedrt_error** error);
void embedrt_model_free(embedrt_model* model);
uint64_t embedrt_model_dim(const embedrt_model* model);
uint64_t embedrt_model_vocab_size(const embedrt_model* model);
embedrt_status embedrt_model_verify(const embedrt_model* model, embedrt_error** error);

/* Outputs (format 1.2): a model has one or more; output 0 is the one embedrt_embed() computes.
 * Past the last output: NULL name, 0 dim and rank. embedrt_model_output_shape() writes the shape of
 * one token's output (rank values; at most 8) to `shape`, which holds `capacity` values. */
size_t embedrt_model_output_count(const embedrt_model* model);
const char* embedrt_model_output_name(const embedrt_model* model, size_t output);
uint64_t embedrt_model_output_dim(const embedrt_model* model, size_t output);
size_t embedrt_model_output_shape(const embedrt_model* model, size_t output, uint64_t* shape, size_t capacity);

/* `isa` is NULL (the best, or EMBEDRT_ISA) or one of "scalar", "sse4.2", "avx2", "avx512", "avx512bf16".
 * The embedder keeps the model alive; the model handle may be freed right after. */
embedrt_status embedrt_embedder_create(const embedrt_model* model, const char* isa, embedrt_embedder** embedder,
                                       embedrt_error** error);

/* Where the kernels prefetch the rows of a table larger than half the last-level cache, and
 * whether they stream their output past the cache (embedrt::PrefetchLevel and
 * embedrt::NonTemporal in embedrt/embedder.hpp). AUTO is embedrt_embedder_create's choice: the
 * level this machine measures faster (once per process: about 0.1 s and a 64-256 MiB buffer for
 * a moment, which L1 or L2 skip), streaming when a call's output exceeds half the cache. No
 * choice changes a result's bits. */
typedef enum embedrt_prefetch_level {
  EMBEDRT_PREFETCH_AUTO = 0,
  EMBEDRT_PREFETCH_L1 = 1,
  EMBEDRT_PREFETCH_L2 = 2
} embedrt_prefetch_level;
typedef enum embedrt_nontemporal {
  EMBEDRT_NONTEMPORAL_AUTO = 0,
  EMBEDRT_NONTEMPORAL_ALWAYS = 1,
  EMBEDRT_NONTEMPORAL_NEVER = 2
} embedrt_nontemporal;
/* embedrt_embedder_create_with's choices (embedrt::EmbedderOptions); zero-initialized, they are
 * embedrt_embedder_create's. The enums are ints: an unknown value is refused with
 * EMBEDRT_INVALID_ARGUMENT naming it. */
typedef struct embedrt_embedder_options {
  const char* isa;      /* NULL (the best, or EMBEDRT_ISA) or a name as embedrt_embedder_create's */
  int prefetch_level;   /* an embedrt_prefetch_level value */
  int nontemporal;      /* an embedrt_nontemporal value */
  uint64_t cache_bytes; /* the last-level cache the memory choices assume; 0: the one detected */
  /* The fewest rows ahead that rows of up to 1 KiB of a table larger than half the cache are
   * prefetched (embedrt::EmbedderOptions::min_rows_ahead): 0, the calibration's under
   * EMBEDRT_PREFETCH_AUTO and 4 otherwise; else 4 to 256 (another value is refused, named). */
  uint64_t min_rows_ahead;
  /* Zero. Later options take these, so that the struct keeps its size and a caller built against
   * this header keeps working; a library that does not know an option refuses it set. */
  uint64_t reserved[3];
} embedrt_embedder_options;
/* `options` NULL: the defaults. */
embedrt_status embedrt_embedder_create_with(const embedrt_model* model, const embedrt_embedder_options* options,
                                            embedrt_embedder** embedder, embedrt_error** error);
void embedrt_embedder_free(embedrt_embedder* embedder);
const char* embedrt_embedder_isa(const embedrt_embedder* embedder);
/* The level the kernels use for an output's rows, "l1" or "l2" (AUTO resolved; a table that fits
 * in half the cache, or an ISA without L2 kernels, is "l1" whatever was asked); "" for a NULL
 * embedder or an output past the model's. */
const char* embedrt_embedder_prefetch_level(const embedrt_embedder* embedder, size_t output);
/* The fewest rows ahead the kernels prefetch an output's rows of up to 1 KiB (4 for a table that
 * fits in half the cache); 0 for a NULL embedder or an output past the model's. */
uint64_t embedrt_embedder_min_rows_ahead(const embedrt_embedder* embedder, size_t output);

/* `out` is a buffer of `out_bytes` bytes (pass sizeof or the allocation's size, not a count of
 * elements) that must hold exactly num_ids * dim values of `out_dtype`, an embedrt_output_dtype
 * value (float, or uint16_t bits): a buffer of another size is refused, never overrun. The dtype
 * is an int so that any value a caller passes is well defined and an unknown one is refused with
 * EMBEDRT_INVALID_ARGUMENT. */
embedrt_status embedrt_embed(const embedrt_embedder* embedder, const embedrt_request* request, void* out,
                             size_t out_bytes, int out_dtype, embedrt_error** error);

/* Several outputs of one request, each into its own buffer (as embedrt_embed's `out`). */
typedef struct embedrt_output_target {
  size_t output;
  void* out;
  size_t out_bytes;
  int out_dtype;
} embedrt_output_target;
embedrt_status embedrt_embed_outputs(const embedrt_embedder* embedder, const embedrt_request* request,
                                     const embedrt_output_target* targets, size_t num_targets, embedrt_error** error);

/* Bags (FORMAT.md 7.2): one pooled vector per bag. `offsets` holds bags + 1 boundaries into the
 * ids, or is NULL for `bags` bags of equal size; `weights` is NULL or one per id; `mode` an
 * embedrt_pool_mode value and `normalize` -1 (the model's default), 0 or 1. `out` holds
 * bags * dim values of `out_dtype` of output `output`. */
typedef enum embedrt_pool_mode {
  EMBEDRT_POOL_DEFAULT = 0, /* the output's pooling.mode */
  EMBEDRT_POOL_SUM = 1,
  EMBEDRT_POOL_MEAN = 2,
  EMBEDRT_POOL_MAX = 3
} embedrt_pool_mode;
typedef struct embedrt_bag_request {
  const void* ids;
  size_t num_ids;
  int ids_are_int64;
  const uint64_t* offsets;
  size_t bags;
  const float* weights;
  int mode;
  int normalize;
} embedrt_bag_request;
embedrt_status embedrt_pool(const embedrt_embedder* embedder, const embedrt_bag_request* request, size_t output,
                            void* out, size_t out_bytes, int out_dtype, embedrt_error** error);

/* Decoding: starts bringing the rows of `ids` (of every output) into the cache, and, when
 * `page_in` is nonzero, asks the OS to read their pages in (a cold mapping); returns at once. */
embedrt_status embedrt_prefetch(const embedrt_embedder* embedder, const void* ids, size_t num_ids, int ids_are_int64,
                                int page_in, embedrt_error** error);

#ifdef __cplusplus
}
#endif

#endif /* EMBEDRT_EMBEDRT_H */
