/* The part of fxmlir's C API that takes MLIR's C API types: a stage whose work is a pass
 * written in C against MLIR's C API. Needs MLIR's headers and, to call MLIR's C API, the
 * libMLIR-C.so fxmlir runs (CMake: link fxmlir::mlir_c beside fxmlir::fxmlir): one MLIR in
 * the process, shared by fxmlir and the pass. */
#ifndef FXMLIR_MLIR_H
#define FXMLIR_MLIR_H

#include "fxmlir.h"
#include "mlir-c/Pass.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Adds a stage named `name` whose work is the pass `callbacks` describe
 * (mlirCreateExternalPass's; its `run` gets each `op_name` operation: "func.func",
 * "builtin.module"), `placement` ("before", "after" or "replace") the stage `anchor`. The
 * pass fails the stage with mlirExternalPassSignalFailure, its diagnostics in the message.
 * The callbacks and `user_data` must stay valid while the session lives and may be called
 * from any thread that compiles with it. */
fxmlir_status fxmlir_session_add_external_stage(fxmlir_session *session, const char *placement,
                                                const char *anchor, const char *name,
                                                const char *op_name,
                                                MlirExternalPassCallbacks callbacks,
                                                void *user_data);

#ifdef __cplusplus
}
#endif

#endif /* FXMLIR_MLIR_H */
