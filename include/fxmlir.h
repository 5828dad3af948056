/* fxmlir's C API: compile PyTorch graphs (fxmlir's interchange documents) and MLIR modules
 * through fxmlir's pipeline, extend the pipeline, and run kernels on your own buffers.
 *
 * Every function that can fail returns an fxmlir_status; FXMLIR_OK is 0. On failure,
 * fxmlir_last_error() gives the message (it names the node, the op and the source line, or
 * the stage, that failed); it stays valid until the next failing call on the same thread.
 * Nothing panics or aborts across this boundary. Strings fxmlir returns are freed with
 * fxmlir_free; handles with their _destroy function.
 *
 * Check the ABI at run time: fxmlir_abi_version() == FXMLIR_ABI_VERSION. Link with
 * libfxmlir.so (CMake: find_package(fxmlir CONFIG REQUIRED), target fxmlir::fxmlir); see
 * docs/c-api.md. */
#ifndef FXMLIR_H
#define FXMLIR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI this header describes. It changes whenever a declaration here does. */
#define FXMLIR_ABI_VERSION 1

/* DLPack (https://github.com/dmlc/dlpack), version 0.8 layout. Include <dlpack/dlpack.h>
 * first to use its own definitions. */
#ifndef DLPACK_VERSION
typedef enum { kDLCPU = 1 } DLDeviceType;
typedef struct {
  int32_t device_type;
  int32_t device_id;
} DLDevice;
typedef enum { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLBool = 6 } DLDataTypeCode;
typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;
typedef struct {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides; /* in elements; NULL for compact row-major */
  uint64_t byte_offset;
} DLTensor;
#endif

typedef enum fxmlir_status {
  FXMLIR_OK = 0,
  FXMLIR_ERROR_ARGUMENT = 1,       /* a null pointer, text that is not UTF-8, a bad value */
  FXMLIR_ERROR_GRAPH = 2,          /* a malformed or invalid graph document, or MLIR that does not parse */
  FXMLIR_ERROR_UNSUPPORTED_OP = 3, /* a node no lowering takes */
  FXMLIR_ERROR_LOWERING = 4,       /* a node whose lowering failed */
  FXMLIR_ERROR_PIPELINE = 5,       /* a stage that failed, a bad stage edit or pipeline, a dialect that does not load */
  FXMLIR_ERROR_TARGET = 6,         /* a target spec that does not parse, or code this host cannot run */
  FXMLIR_ERROR_PLUGIN = 7,         /* a native plugin refused (another MLIR/LLVM, wrong API version) */
  FXMLIR_ERROR_CALL = 8,           /* buffers that do not match the kernel */
  FXMLIR_ERROR_IO = 9,
  FXMLIR_ERROR_INTERNAL = 10,      /* a bug in fxmlir */
  FXMLIR_ERROR_CHECK = 11          /* a kernel's check failed during the call: an index out of range, an integer division by zero (names the node) */
} fxmlir_status;

uint32_t fxmlir_abi_version(void);
const char *fxmlir_last_error(void);
void fxmlir_free(char *text);

/* ---- Sessions: the target, the pipeline and its stages, dialects, plugins, dumps ---- */

typedef struct fxmlir_session fxmlir_session;

/* `target`: a target spec ("host", "znver4", "x86-64-v3,+avx512f", "skylake-avx512,threads=2";
 * `fxmlir target SPEC` describes one), or NULL for FXMLIR_TARGET, else the host. */
fxmlir_status fxmlir_session_create(const char *target, fxmlir_session **session);
void fxmlir_session_destroy(fxmlir_session *session);

/* A named pipeline ("default"; `fxmlir-opt --list-pipelines`). */
fxmlir_status fxmlir_session_set_pipeline(fxmlir_session *session, const char *name);
/* Dumps of every compile (interchange, each stage's MLIR, LLVM IR) go to `dir`. */
fxmlir_status fxmlir_session_set_dump_dir(fxmlir_session *session, const char *dir);
/* Adds, replaces or removes a stage, as `fxmlir-opt --add-stage` spells it:
 *   "after:fusion:cse:passes=builtin.module(cse)"   a textual pass pipeline
 *   "before:fusion:mine:pdl=patterns.pdl.mlir"       PDL patterns (a file)
 *   "replace:parallel:tile:transform=script.mlir"    a transform script (a file)
 *   "before:fusion:again:work=schedule"              one of fxmlir's stages' own work
 *   "remove:parallel"                                takes a stage out
 * Checked against the pipeline at once; edits apply in order. */
fxmlir_status fxmlir_session_edit_stages(fxmlir_session *session, const char *edit);
/* The stages, in order, one name per line (free with fxmlir_free). */
fxmlir_status fxmlir_session_stages(const fxmlir_session *session, char **names);
/* A dialect defined in IRDL (a file), loaded into every compile. */
fxmlir_status fxmlir_session_add_dialect(fxmlir_session *session, const char *irdl_file);

/* A native MLIR plugin: a shared object built against the MLIR fxmlir runs (Debian's
 * libMLIR.so.22.1, or fxmlir's libMLIR-C.so), exporting mlirGetPassPluginInfo (a pass
 * plugin, whose passes stages may then name) or mlirGetDialectPluginInfo (a dialect plugin,
 * registered with every compile's context). It is loaded once per process; one built
 * against another MLIR or LLVM, or with MLIR linked in, is refused before it is opened. */
#define FXMLIR_PASS_PLUGIN 0
#define FXMLIR_DIALECT_PLUGIN 1
fxmlir_status fxmlir_session_load_plugin(fxmlir_session *session, const char *path, uint32_t kind);

/* ---- IR: lower a graph, run stages on a module ---- */

/* The graph (an interchange document, e.g. a `<graph>.fx.json` dump) lowered to MLIR, before
 * any stage, printed with locations. */
fxmlir_status fxmlir_lower(const fxmlir_session *session, const char *graph, size_t length,
                           char **mlir);
/* Runs the session's stages on `module` (MLIR text or bytecode) through the stage named
 * `last_stage` (NULL: all) and returns the module after it, printed with locations. */
fxmlir_status fxmlir_run_stages(const fxmlir_session *session, const char *module, size_t length,
                                const char *last_stage, char **mlir);

/* ---- Kernels ---- */

typedef struct fxmlir_kernel fxmlir_kernel;

typedef struct {
  int32_t ndim;
  const int64_t *shape;   /* owned by the kernel */
  const int64_t *strides; /* in elements */
  DLDataType dtype;
} fxmlir_tensor_info;

/* Compiles a graph (an interchange document) for the session's target, which must run on
 * this host. Identical graphs share one kernel within the process. */
fxmlir_status fxmlir_compile(const fxmlir_session *session, const char *graph, size_t length,
                             fxmlir_kernel **kernel);
void fxmlir_kernel_destroy(fxmlir_kernel *kernel);
/* The number of inputs (`outputs` 0) or outputs (`outputs` 1). */
size_t fxmlir_kernel_count(const fxmlir_kernel *kernel, uint32_t outputs);
/* The layout input or output `index` was compiled for. */
fxmlir_status fxmlir_kernel_tensor(const fxmlir_kernel *kernel, uint32_t outputs, size_t index,
                                   fxmlir_tensor_info *info);
/* Runs the kernel on caller-owned CPU buffers, written in place into `outputs`. Each buffer is
 * checked against the compiled layout (device, dtype, shape, strides; outputs may not
 * overlap another buffer) before anything runs. */
fxmlir_status fxmlir_kernel_call(const fxmlir_kernel *kernel, const DLTensor *inputs,
                                 size_t num_inputs, const DLTensor *outputs, size_t num_outputs);

#ifdef __cplusplus
}
#endif

#endif /* FXMLIR_H */
