// An example native pass plugin: `fxmlir-example-count-ops` records on each function how many
// operations it holds (`example.op_count`). fxmlir loads it with `--load-pass-plugin`,
// `fxmlir_session_load_pass_plugin` or `fxmlir.config.pass_plugins`, and a stage of one's own
// names the pass in its passes:
//   --add-stage 'after:fusion:count:passes=builtin.module(func.func(fxmlir-example-count-ops))'

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Tools/Plugins/PassPlugin.h"
#include "llvm/Config/llvm-config.h"

namespace {

struct CountOps
    : public mlir::PassWrapper<CountOps, mlir::OperationPass<mlir::func::FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(CountOps)

  llvm::StringRef getArgument() const final { return "fxmlir-example-count-ops"; }
  llvm::StringRef getDescription() const final {
    return "Records on each function the number of operations in its body";
  }

  void runOnOperation() final {
    mlir::func::FuncOp function = getOperation();
    int64_t count = 0;
    function.walk([&](mlir::Operation *op) {
      if (op != function.getOperation())
        ++count;
    });
    auto i64 = mlir::IntegerType::get(&getContext(), 64);
    function->setAttr("example.op_count", mlir::IntegerAttr::get(i64, count));
  }
};

} // namespace

extern "C" LLVM_ATTRIBUTE_WEAK __attribute__((visibility("default")))
mlir::PassPluginLibraryInfo mlirGetPassPluginInfo() {
  return {MLIR_PLUGIN_API_VERSION, "FxmlirExamplePasses", LLVM_VERSION_STRING,
          [] { mlir::PassRegistration<CountOps>(); }};
}
