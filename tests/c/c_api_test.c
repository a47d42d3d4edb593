/* The C API, used from C: open, verify, embed (int32/int64, ragged, bf16 output), and every
 * failure path returning its status and message. usage: c_api_test MODEL.embt */
#include <embedrt/embedrt.h>
#include <stdio.h>
#include <string.h>

static int passed = 0, failed = 0;

#define CHECK(condition)                                         \
  do {                                                           \
    if (condition) {                                             \
      ++passed;                                                  \
    } else {                                                     \
      ++failed;                                                  \
      fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #condition); \
    }                                                            \
  } while (0)

static float expected(int id, int position, int j) { return (float)id + (float)j / 8.0f + 100.0f * (float)position; }

/* Whether `embedder` embeds the one sequence `request` (3 ids from position 0, dim 5) as expected(). */
static int embeds_expected(const embedrt_embedder* embedder, const embedrt_request* request) {
  float values[3 * 5];
  memset(values, 0xff, sizeof values); /* NaNs: a value not written fails the comparison */
  if (embedrt_embed(embedder, request, values, sizeof values, EMBEDRT_OUT_F32, NULL) != EMBEDRT_OK) return 0;
  const int64_t* ids = (const int64_t*)request->ids;
  int same = 1;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) same &= values[i * 5 + j] == expected((int)ids[i], i, j);
  return same;
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  embedrt_error* error = NULL;
  embedrt_model* model = NULL;

  CHECK(embedrt_model_open("/nonexistent/model.embt", &model, &error) == EMBEDRT_NOT_FOUND);
  CHECK(error != NULL && strstr(embedrt_error_message(error), "/nonexistent/model.embt") != NULL);
  CHECK(embedrt_error_code(error) == EMBEDRT_NOT_FOUND);
  embedrt_error_free(error);
  error = NULL;
  CHECK(embedrt_model_open(NULL, &model, NULL) == EMBEDRT_INVALID_ARGUMENT); /* NULL error pointer is fine */

  /* Residency: an unknown value is refused naming it; every mode opens the same model. */
  CHECK(embedrt_model_open_with(argv[1], 3, 0, &model, &error) == EMBEDRT_INVALID_ARGUMENT);
  CHECK(error != NULL && strstr(embedrt_error_message(error), "residency value 3") != NULL);
  CHECK(model == NULL);
  embedrt_error_free(error);
  error = NULL;
  CHECK(embedrt_model_open_with(argv[1], -1, 0, &model, NULL) == EMBEDRT_INVALID_ARGUMENT);
  for (int residency = EMBEDRT_RESIDENCY_MMAP; residency <= EMBEDRT_RESIDENCY_COPY; ++residency) {
    CHECK(embedrt_model_open_with(argv[1], residency, 0, &model, NULL) == EMBEDRT_OK);
    CHECK(embedrt_model_dim(model) == 5);
    CHECK(embedrt_model_verify(model, NULL) == EMBEDRT_OK);
    embedrt_model_free(model);
    model = NULL;
  }

  if (embedrt_model_open(argv[1], &model, &error) != EMBEDRT_OK) {
    fprintf(stderr, "open: %s\n", embedrt_error_message(error));
    return 1;
  }
  CHECK(embedrt_model_dim(model) == 5);
  CHECK(embedrt_model_vocab_size(model) == 10);
  CHECK(embedrt_model_verify(model, NULL) == EMBEDRT_OK);

  embedrt_embedder* embedder = NULL;
  CHECK(embedrt_embedder_create(model, "avx9", &embedder, &error) == EMBEDRT_INVALID_ARGUMENT);
  CHECK(error != NULL && strstr(embedrt_error_message(error), "avx9") != NULL);
  embedrt_error_free(error);
  error = NULL;
  CHECK(embedrt_embedder_create(model, "scalar", &embedder, NULL) == EMBEDRT_OK);
  CHECK(strcmp(embedrt_embedder_isa(embedder), "scalar") == 0);
  embedrt_embedder_free(embedder);
  CHECK(embedrt_embedder_create(model, NULL, &embedder, NULL) == EMBEDRT_OK);

  /* embedrt_embedder_create_with: unknown prefetch levels and streaming modes refused, naming
   * them; every choice embeds the same values (ALWAYS streams even these 60 bytes). This table is
   * far smaller than half the cache, so its rows go to L1 whatever was asked ("l1"), unless the
   * cache is said to be 1 byte: then L2 is taken where asked, if the ISA has L2 kernels. */
  {
    embedrt_embedder* chosen = NULL;
    embedrt_embedder_options options;
    const int64_t few[3] = {7, 0, 9};
    embedrt_request three;
    memset(&three, 0, sizeof three);
    three.ids = few;
    three.ids_are_int64 = 1;
    three.num_ids = 3;
    three.sequences = 1;
    memset(&options, 0, sizeof options);
    options.prefetch_level = 3;
    CHECK(embedrt_embedder_create_with(model, &options, &chosen, &error) == EMBEDRT_INVALID_ARGUMENT);
    CHECK(error != NULL && strstr(embedrt_error_message(error), "prefetch level value 3") != NULL);
    CHECK(chosen == NULL);
    embedrt_error_free(error);
    error = NULL;
    options.prefetch_level = EMBEDRT_PREFETCH_L2;
    options.nontemporal = -1;
    CHECK(embedrt_embedder_create_with(model, &options, &chosen, &error) == EMBEDRT_INVALID_ARGUMENT);
    CHECK(error != NULL && strstr(embedrt_error_message(error), "nontemporal value -1") != NULL);
    CHECK(chosen == NULL);
    embedrt_error_free(error);
    error = NULL;
    options.nontemporal = EMBEDRT_NONTEMPORAL_AUTO;
    options.reserved[2] = 1; /* an option of a later version */
    CHECK(embedrt_embedder_create_with(model, &options, &chosen, &error) == EMBEDRT_INVALID_ARGUMENT);
    CHECK(error != NULL && strstr(embedrt_error_message(error), "reserved must be zero") != NULL);
    CHECK(chosen == NULL);
    embedrt_error_free(error);
    error = NULL;
    options.reserved[2] = 0;
    const uint64_t out_of_range[2] = {3, 257}; /* min_rows_ahead: 0 (the default) or 4-256 */
    for (int k = 0; k < 2; ++k) {
      char named[64];
      snprintf(named, sizeof named, "min_rows_ahead %llu", (unsigned long long)out_of_range[k]);
      options.min_rows_ahead = out_of_range[k];
      CHECK(embedrt_embedder_create_with(model, &options, &chosen, &error) == EMBEDRT_INVALID_ARGUMENT);
      CHECK(error != NULL && strstr(embedrt_error_message(error), named) != NULL);
      CHECK(chosen == NULL);
      embedrt_error_free(error);
      error = NULL;
    }
    /* Rows from memory (a cache of 1 byte): the distance asked; cached rows: 4 whatever was asked. */
    options.min_rows_ahead = 256;
    options.cache_bytes = 1;
    CHECK(embedrt_embedder_create_with(model, &options, &chosen, NULL) == EMBEDRT_OK);
    CHECK(embedrt_embedder_min_rows_ahead(chosen, 0) == 256);
    CHECK(embedrt_embedder_min_rows_ahead(chosen, 1) == 0); /* past the one output */
    CHECK(embeds_expected(chosen, &three));
    embedrt_embedder_free(chosen);
    options.cache_bytes = 0;
    CHECK(embedrt_embedder_create_with(model, &options, &chosen, NULL) == EMBEDRT_OK);
    CHECK(embedrt_embedder_min_rows_ahead(chosen, 0) == 4);
    embedrt_embedder_free(chosen);
    options.min_rows_ahead = 0;
    CHECK(embedrt_embedder_min_rows_ahead(NULL, 0) == 0);
    options.isa = "avx9";
    CHECK(embedrt_embedder_create_with(model, &options, &chosen, NULL) == EMBEDRT_INVALID_ARGUMENT);
    CHECK(embedrt_embedder_create_with(NULL, NULL, &chosen, NULL) == EMBEDRT_INVALID_ARGUMENT);
    CHECK(strcmp(embedrt_embedder_prefetch_level(NULL, 0), "") == 0);
    CHECK(embedrt_embedder_create_with(model, NULL, &chosen, NULL) == EMBEDRT_OK); /* NULL: the defaults */
    CHECK(strcmp(embedrt_embedder_prefetch_level(chosen, 0), "l1") == 0);
    CHECK(strcmp(embedrt_embedder_prefetch_level(chosen, 1), "") == 0); /* past the one output */
    embedrt_embedder_free(chosen);

    const char* isas[2] = {"scalar", NULL};
    for (int k = 0; k < 2; ++k) {
      options.isa = isas[k];
      for (int level = EMBEDRT_PREFETCH_AUTO; level <= EMBEDRT_PREFETCH_L2; ++level) {
        for (int stream = EMBEDRT_NONTEMPORAL_AUTO; stream <= EMBEDRT_NONTEMPORAL_NEVER; ++stream) {
          options.prefetch_level = level;
          options.nontemporal = stream;
          options.cache_bytes = 0;
          CHECK(embedrt_embedder_create_with(model, &options, &chosen, NULL) == EMBEDRT_OK);
          CHECK(strcmp(embedrt_embedder_prefetch_level(chosen, 0), "l1") == 0);
          CHECK(embeds_expected(chosen, &three));
          const char* isa = embedrt_embedder_isa(chosen); /* static storage: it outlives the embedder */
          embedrt_embedder_free(chosen);
          if (level == EMBEDRT_PREFETCH_AUTO) continue; /* from memory, auto is the machine's calibration */
          options.cache_bytes = 1; /* every table larger than half the cache: rows from memory */
          CHECK(embedrt_embedder_create_with(model, &options, &chosen, NULL) == EMBEDRT_OK);
          const int has_l2_kernels = EMBEDRT_PREFETCH_L2_KERNELS && (strcmp(isa, "avx2") == 0 ||
                                                                    strcmp(isa, "avx512") == 0 ||
                                                                    strcmp(isa, "avx512bf16") == 0);
          const char* used = level == EMBEDRT_PREFETCH_L2 && has_l2_kernels ? "l2" : "l1";
          CHECK(strcmp(embedrt_embedder_prefetch_level(chosen, 0), used) == 0);
          CHECK(embeds_expected(chosen, &three));
          embedrt_embedder_free(chosen);
        }
      }
    }
  }
  embedrt_model_free(model); /* the embedder keeps the mapping alive */

  /* Two sequences of three int32 ids, starting at position 2. */
  const int32_t ids32[6] = {3, 1, 4, 1, 5, 9};
  float out[6 * 5];
  embedrt_request request;
  memset(&request, 0, sizeof request);
  request.ids = ids32;
  request.num_ids = 6;
  request.sequences = 2;
  request.start = 2;
  CHECK(embedrt_embed(embedder, &request, out, sizeof out, EMBEDRT_OUT_F32, NULL) == EMBEDRT_OK);
  int exact = 1;
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 5; ++j) exact &= out[i * 5 + j] == expected(ids32[i], 2 + i % 3, j);
  CHECK(exact);

  /* Ragged int64: lengths 1 and 5, per-sequence starts 7 and 0. */
  const int64_t ids64[6] = {9, 0, 1, 2, 3, 4};
  const uint64_t offsets[3] = {0, 1, 6}, starts[2] = {7, 0};
  memset(&request, 0, sizeof request);
  request.ids = ids64;
  request.ids_are_int64 = 1;
  request.num_ids = 6;
  request.sequences = 2;
  request.sequence_offsets = offsets;
  request.start_positions = starts;
  CHECK(embedrt_embed(embedder, &request, out, sizeof out, EMBEDRT_OUT_F32, NULL) == EMBEDRT_OK);
  CHECK(out[0] == expected(9, 7, 0));
  CHECK(out[5 * 5 + 4] == expected(4, 4, 4));

  /* bf16 output: token 5 is id 4 at position 4, element 0: 4 + 400 = 404.0f = 0x43ca0000, exact. */
  uint16_t bits[30];
  CHECK(embedrt_embed(embedder, &request, bits, sizeof bits, EMBEDRT_OUT_BF16, NULL) == EMBEDRT_OK);
  CHECK(bits[5 * 5] == 0x43ca);
  /* The bf16 buffer passed as float32: half the bytes it needs, refused, nothing written. */
  bits[0] = 0x1234;
  CHECK(embedrt_embed(embedder, &request, bits, sizeof bits, EMBEDRT_OUT_F32, NULL) == EMBEDRT_INVALID_ARGUMENT);
  CHECK(bits[0] == 0x1234);
  /* A byte count that is not a whole number of elements. */
  CHECK(embedrt_embed(embedder, &request, bits, sizeof bits - 1, EMBEDRT_OUT_BF16, NULL) == EMBEDRT_INVALID_ARGUMENT);

  /* Failures: an id past the vocabulary, a position past the table, a wrong output size. */
  const int64_t bad[2] = {1, 10};
  memset(&request, 0, sizeof request);
  request.ids = bad;
  request.ids_are_int64 = 1;
  request.num_ids = 2;
  request.sequences = 1;
  float before = out[0];
  CHECK(embedrt_embed(embedder, &request, out, 10 * sizeof(float), EMBEDRT_OUT_F32, &error) == EMBEDRT_OUT_OF_RANGE);
  CHECK(error != NULL && strcmp(embedrt_error_message(error), "sequence 0, position 1: id 10 is out of range [0, 10)") == 0);
  CHECK(out[0] == before); /* nothing written */
  embedrt_error_free(error);
  error = NULL;
  request.ids = ids64;
  request.start = 7;
  CHECK(embedrt_embed(embedder, &request, out, 10 * sizeof(float), EMBEDRT_OUT_F32, &error) == EMBEDRT_OUT_OF_RANGE);
  CHECK(error != NULL && strstr(embedrt_error_message(error), "position 8 is past the limit of 8 positions") != NULL);
  embedrt_error_free(error);
  error = NULL;
  CHECK(embedrt_embed(embedder, &request, out, 9 * sizeof(float), EMBEDRT_OUT_F32, NULL) == EMBEDRT_INVALID_ARGUMENT);
  CHECK(embedrt_embed(embedder, NULL, out, 9 * sizeof(float), EMBEDRT_OUT_F32, NULL) == EMBEDRT_INVALID_ARGUMENT);
  CHECK(embedrt_embed(embedder, &request, out, 10 * sizeof(float), 7, NULL) == EMBEDRT_INVALID_ARGUMENT);

  embedrt_embedder_free(embedder);

  /* A model with two outputs: names, dims, shapes, both embedded by one call, prefetch. */
  CHECK(embedrt_model_open(argv[2], &model, NULL) == EMBEDRT_OK);
  CHECK(embedrt_model_output_count(model) == 2);
  CHECK(strcmp(embedrt_model_output_name(model, 0), "embeddings") == 0);
  CHECK(strcmp(embedrt_model_output_name(model, 1), "extra") == 0);
  CHECK(embedrt_model_output_name(model, 2) == NULL);
  CHECK(embedrt_model_output_dim(model, 1) == 6);
  uint64_t shape[8] = {0};
  CHECK(embedrt_model_output_shape(model, 1, shape, 8) == 2 && shape[0] == 2 && shape[1] == 3);
  CHECK(embedrt_model_output_shape(model, 0, shape, 8) == 1 && shape[0] == 5);
  CHECK(embedrt_model_output_shape(model, 9, shape, 8) == 0);
  CHECK(embedrt_embedder_create(model, NULL, &embedder, NULL) == EMBEDRT_OK);
  embedrt_model_free(model);
  const int64_t two[2] = {3, 9}; /* 9 is past the extra table's 4 rows: row 0 there */
  memset(&request, 0, sizeof request);
  request.ids = two;
  request.ids_are_int64 = 1;
  request.num_ids = 2;
  request.sequences = 1;
  float primary[2 * 5], extra_out[2 * 6];
  embedrt_output_target targets[2] = {{1, extra_out, sizeof extra_out, EMBEDRT_OUT_F32},
                                      {0, primary, sizeof primary, EMBEDRT_OUT_F32}};
  CHECK(embedrt_embed_outputs(embedder, &request, targets, 2, NULL) == EMBEDRT_OK);
  CHECK(primary[5 + 1] == expected(9, 1, 1));
  CHECK(extra_out[0] == 1030.0f && extra_out[5] == 1035.0f && extra_out[6] == 1000.0f && extra_out[11] == 1005.0f);
  targets[0].output = 5;
  CHECK(embedrt_embed_outputs(embedder, &request, targets, 2, &error) == EMBEDRT_INVALID_ARGUMENT);
  CHECK(error != NULL && strcmp(embedrt_error_message(error), "output index 5 is past the model's 2 outputs") == 0);
  embedrt_error_free(error);
  error = NULL;
  CHECK(embedrt_prefetch(embedder, two, 2, 1, 0, NULL) == EMBEDRT_OK);
  CHECK(embedrt_prefetch(embedder, ids32, 6, 0, 1, NULL) == EMBEDRT_OK);
  CHECK(embedrt_prefetch(embedder, NULL, 1, 0, 0, NULL) == EMBEDRT_INVALID_ARGUMENT);

  /* Bags of output 1 (the primary output has positions: no bags there): {3, 1} summed, {} empty,
   * {4} alone (past the extra table: row 0); then the mean of all three. */
  const int64_t bag_ids[3] = {3, 1, 4};
  const uint64_t bag_offsets[4] = {0, 2, 2, 3};
  embedrt_bag_request bags;
  memset(&bags, 0, sizeof bags);
  bags.ids = bag_ids;
  bags.num_ids = 3;
  bags.ids_are_int64 = 1;
  bags.offsets = bag_offsets;
  bags.bags = 3;
  bags.mode = EMBEDRT_POOL_SUM;
  bags.normalize = -1;
  float pooled[3 * 6];
  CHECK(embedrt_pool(embedder, &bags, 1, pooled, sizeof pooled, EMBEDRT_OUT_F32, NULL) == EMBEDRT_OK);
  CHECK(pooled[1] == 1031.0f + 1011.0f && pooled[6] == 0.0f && pooled[12 + 4] == 1004.0f);
  bags.offsets = NULL;
  bags.bags = 1;
  bags.mode = EMBEDRT_POOL_MEAN;
  CHECK(embedrt_pool(embedder, &bags, 1, pooled, 6 * sizeof(float), EMBEDRT_OUT_F32, NULL) == EMBEDRT_OK);
  CHECK(pooled[0] == (1030.0f + 1010.0f + 1000.0f) / 3.0f);
  CHECK(embedrt_pool(embedder, &bags, 0, pooled, 5 * sizeof(float), EMBEDRT_OUT_F32, &error) == EMBEDRT_UNSUPPORTED);
  CHECK(error != NULL && strstr(embedrt_error_message(error), "adds positions") != NULL);
  embedrt_error_free(error);
  error = NULL;
  bags.mode = 9;
  CHECK(embedrt_pool(embedder, &bags, 1, pooled, 6 * sizeof(float), EMBEDRT_OUT_F32, &error) == EMBEDRT_INVALID_ARGUMENT);
  CHECK(error != NULL && strcmp(embedrt_error_message(error), "unknown pooling mode 9") == 0);
  embedrt_error_free(error);
  error = NULL;
  bags.mode = EMBEDRT_POOL_DEFAULT; /* the output has no pooling.mode */
  CHECK(embedrt_pool(embedder, &bags, 1, pooled, 6 * sizeof(float), EMBEDRT_OUT_F32, NULL) == EMBEDRT_INVALID_ARGUMENT);
  embedrt_embedder_free(embedder);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
