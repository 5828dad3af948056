/* Compiles a graph (an interchange document fxmlir dumped from a model), runs it on buffers
 * of its own filled from INPUTS (each kernel input's bytes as laid out for the kernel, in
 * order), and compares each float32 output with REFERENCE (each output's values, row-major,
 * in order): prints the largest difference and exits 1 if it is beyond the tolerance.
 *
 *   run_graph GRAPH.fx.json INPUTS.bin REFERENCE.bin [TARGET]
 *
 * Then it checks that a call with a buffer of the wrong shape is refused with
 * FXMLIR_ERROR_CALL, and nothing runs. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* Bytes a buffer laid out as `info` spans. */
static size_t extent(const fxmlir_tensor_info *info) {
  size_t last = 0;
  for (int d = 0; d < info->ndim; ++d) {
    if (info->shape[d] == 0)
      return 0;
    last += (size_t)(info->shape[d] - 1) * (size_t)info->strides[d];
  }
  return (last + 1) * info->dtype.bits / 8;
}

static size_t numel(const fxmlir_tensor_info *info) {
  size_t n = 1;
  for (int d = 0; d < info->ndim; ++d)
    n *= (size_t)info->shape[d];
  return n;
}

/* A DLTensor over `data`, laid out as `info`. */
static DLTensor tensor(const fxmlir_tensor_info *info, void *data) {
  DLTensor t;
  t.data = data;
  t.device.device_type = kDLCPU;
  t.device.device_id = 0;
  t.ndim = info->ndim;
  t.dtype = info->dtype;
  t.shape = (int64_t *)info->shape;
  t.strides = (int64_t *)info->strides;
  t.byte_offset = 0;
  return t;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s GRAPH.fx.json INPUTS.bin REFERENCE.bin [TARGET]\n", argv[0]);
    return 2;
  }
  check_abi();
  size_t graph_length, inputs_length, reference_length;
  char *graph = read_file(argv[1], &graph_length);
  char *inputs_bytes = read_file(argv[2], &inputs_length);
  char *reference_bytes = read_file(argv[3], &reference_length);

  fxmlir_session *session;
  check(fxmlir_session_create(argc > 4 ? argv[4] : NULL, &session), "fxmlir_session_create");
  fxmlir_kernel *kernel;
  check(fxmlir_compile(session, graph, graph_length, &kernel), "fxmlir_compile");

  size_t num_inputs = fxmlir_kernel_count(kernel, 0);
  size_t num_outputs = fxmlir_kernel_count(kernel, 1);
  DLTensor *inputs = calloc(num_inputs + 1, sizeof(DLTensor));
  DLTensor *outputs = calloc(num_outputs + 1, sizeof(DLTensor));
  size_t offset = 0;
  for (size_t i = 0; i < num_inputs; ++i) {
    fxmlir_tensor_info info;
    check(fxmlir_kernel_tensor(kernel, 0, i, &info), "fxmlir_kernel_tensor");
    size_t bytes = extent(&info);
    if (offset + bytes > inputs_length) {
      fprintf(stderr, "%s holds %zu bytes; input %zu needs %zu more\n", argv[2], inputs_length, i,
              offset + bytes - inputs_length);
      return 2;
    }
    void *data = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
    memcpy(data, inputs_bytes + offset, bytes);
    offset += bytes;
    inputs[i] = tensor(&info, data);
  }
  for (size_t i = 0; i < num_outputs; ++i) {
    fxmlir_tensor_info info;
    check(fxmlir_kernel_tensor(kernel, 1, i, &info), "fxmlir_kernel_tensor");
    outputs[i] = tensor(&info, aligned_alloc(64, (extent(&info) + 63) / 64 * 64 + 64));
  }
  check(fxmlir_kernel_call(kernel, inputs, num_inputs, outputs, num_outputs), "fxmlir_kernel_call");

  int failed = 0;
  size_t at = 0;
  for (size_t i = 0; i < num_outputs; ++i) {
    fxmlir_tensor_info info;
    check(fxmlir_kernel_tensor(kernel, 1, i, &info), "fxmlir_kernel_tensor");
    if (info.dtype.code != kDLFloat || info.dtype.bits != 32) {
      fprintf(stderr, "output %zu is not float32: this example compares float32 only\n", i);
      return 2;
    }
    size_t n = numel(&info);
    if ((at + n) * sizeof(float) > reference_length) {
      fprintf(stderr, "%s is too short for output %zu\n", argv[3], i);
      return 2;
    }
    const float *expected = (const float *)reference_bytes + at;
    const float *actual = outputs[i].data;
    double scale = 1.0, worst = 0.0;
    for (size_t k = 0; k < n; ++k)
      scale = fmax(scale, fabs(expected[k]));
    for (size_t k = 0; k < n; ++k) {
      /* Element k in row-major order, at its strided place in the kernel's layout. */
      size_t rest = k, place = 0;
      for (int d = info.ndim - 1; d >= 0; --d) {
        place += (rest % (size_t)info.shape[d]) * (size_t)info.strides[d];
        rest /= (size_t)info.shape[d];
      }
      worst = fmax(worst, fabs((double)actual[place] - expected[k]));
    }
    double tolerance = 1e-4 * scale;
    printf("output %zu: %zu values, max abs difference %.3g (tolerance %.3g)%s\n", i, n, worst,
           tolerance, worst <= tolerance ? "" : "  MISMATCH");
    printf("output %zu starts:", i);
    for (size_t k = 0; k < n && k < 4; ++k)
      printf(" %.5f", actual[k]);
    printf("\n");
    failed |= !(worst <= tolerance);
    at += n;
  }

  /* A buffer of the wrong shape: refused, naming the input, before anything runs. */
  if (num_inputs > 0 && inputs[0].ndim > 0) {
    int64_t *shape = malloc(sizeof(int64_t) * (size_t)inputs[0].ndim);
    memcpy(shape, inputs[0].shape, sizeof(int64_t) * (size_t)inputs[0].ndim);
    shape[0] += 1;
    DLTensor wrong = inputs[0];
    wrong.shape = shape;
    DLTensor saved = inputs[0];
    inputs[0] = wrong;
    fxmlir_status status = fxmlir_kernel_call(kernel, inputs, num_inputs, outputs, num_outputs);
    inputs[0] = saved;
    printf("wrong shape: status %d: %s\n", (int)status, fxmlir_last_error());
    failed |= status != FXMLIR_ERROR_CALL;
    free(shape);
  }

  fxmlir_kernel_destroy(kernel);
  fxmlir_session_destroy(session);
  return failed;
}
