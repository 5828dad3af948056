/* Runs fxmlir's pipeline from C: lowers a graph (an interchange document), edits the stages,
 * loads native plugins and dialects, and prints the module after a stage.
 *
 *   stages GRAPH.fx.json [--target SPEC] [--pass-plugin SO] [--dialect-plugin SO]
 *          [--irdl FILE] [--edit EDIT]... [--c-stage PLACEMENT:ANCHOR:NAME]...
 *          [--failing-c-stage PLACEMENT:ANCHOR:NAME] [--last STAGE] [--list]
 *
 * An EDIT is what `fxmlir-opt --add-stage` takes ("after:fusion:cse:passes=builtin.module(cse)",
 * "remove:parallel"); without --last, the module is printed as lowered (before any stage).
 * --c-stage adds a stage whose work is a pass written here in C against MLIR's C API: it
 * marks every function `example.c_stage`; --failing-c-stage one that fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "fxmlir-mlir.h"
#include "mlir-c/BuiltinAttributes.h"
#include "mlir-c/Diagnostics.h"
#include "mlir-c/IR.h"

/* The C pass: its `run` callback gets each func.func. */
static void mark_function(MlirOperation function, MlirExternalPass pass, void *user_data) {
  (void)pass;
  (void)user_data;
  MlirContext context = mlirOperationGetContext(function);
  mlirOperationSetDiscardableAttributeByName(function, mlirStringRefCreateFromCString("example.c_stage"),
                                             mlirUnitAttrGet(context));
}

static void refuse_function(MlirOperation function, MlirExternalPass pass, void *user_data) {
  (void)user_data;
  mlirEmitError(mlirOperationGetLocation(function), "the example C pass refuses this function");
  mlirExternalPassSignalFailure(pass);
}

/* Adds the C pass as a stage: SPEC is PLACEMENT:ANCHOR:NAME. */
static void add_c_stage(fxmlir_session *session, const char *spec, int failing) {
  char placement[64], anchor[64], name[64];
  if (sscanf(spec, "%63[^:]:%63[^:]:%63s", placement, anchor, name) != 3) {
    fprintf(stderr, "--c-stage takes PLACEMENT:ANCHOR:NAME, got %s\n", spec);
    exit(2);
  }
  MlirExternalPassCallbacks callbacks = {0};
  callbacks.run = failing ? refuse_function : mark_function;
  check(fxmlir_session_add_external_stage(session, placement, anchor, name, "func.func", callbacks,
                                          NULL),
        "fxmlir_session_add_external_stage");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s GRAPH.fx.json [options]\n", argv[0]);
    return 2;
  }
  check_abi();
  const char *target = NULL, *last = NULL;
  int list = 0;
  for (int i = 2; i < argc; ++i)
    if (!strcmp(argv[i], "--target") && i + 1 < argc)
      target = argv[++i];
  fxmlir_session *session;
  check(fxmlir_session_create(target, &session), "fxmlir_session_create");
  for (int i = 2; i < argc; ++i) {
    const char *flag = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(flag, "--list")) {
      list = 1;
      continue;
    }
    if (!value) {
      fprintf(stderr, "%s needs a value\n", flag);
      return 2;
    }
    ++i;
    if (!strcmp(flag, "--target"))
      continue;
    else if (!strcmp(flag, "--pass-plugin"))
      check(fxmlir_session_load_plugin(session, value, FXMLIR_PASS_PLUGIN), "loading a pass plugin");
    else if (!strcmp(flag, "--dialect-plugin"))
      check(fxmlir_session_load_plugin(session, value, FXMLIR_DIALECT_PLUGIN),
            "loading a dialect plugin");
    else if (!strcmp(flag, "--irdl"))
      check(fxmlir_session_add_dialect(session, value), "fxmlir_session_add_dialect");
    else if (!strcmp(flag, "--edit"))
      check(fxmlir_session_edit_stages(session, value), "fxmlir_session_edit_stages");
    else if (!strcmp(flag, "--c-stage"))
      add_c_stage(session, value, 0);
    else if (!strcmp(flag, "--failing-c-stage"))
      add_c_stage(session, value, 1);
    else if (!strcmp(flag, "--last"))
      last = value;
    else {
      fprintf(stderr, "unknown option %s\n", flag);
      return 2;
    }
  }
  if (list) {
    char *names;
    check(fxmlir_session_stages(session, &names), "fxmlir_session_stages");
    printf("%s\n", names);
    fxmlir_free(names);
  }
  size_t length;
  char *graph = read_file(argv[1], &length);
  char *lowered;
  check(fxmlir_lower(session, graph, length, &lowered), "fxmlir_lower");
  if (last) {
    char *after;
    check(fxmlir_run_stages(session, lowered, strlen(lowered), last, &after), "fxmlir_run_stages");
    printf("%s", after);
    fxmlir_free(after);
  } else {
    printf("%s", lowered);
  }
  fxmlir_free(lowered);
  fxmlir_session_destroy(session);
  free(graph);
  return 0;
}
