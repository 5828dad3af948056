// RUN: fxmlir-opt --irdl-file=%S/../../examples/xacc/fxmlir_xacc/xacc.irdl.mlir %s | FileCheck %s --check-prefix=PARSED
// RUN: mlir-opt --irdl-file=%S/../../examples/xacc/fxmlir_xacc/xacc.irdl.mlir %s | FileCheck %s --check-prefix=PARSED
// RUN: fxmlir-opt --irdl-file=%S/../../examples/xacc/fxmlir_xacc/xacc.irdl.mlir --pipeline fusion \
// RUN:     --add-stage 'before:fusion:xacc-to-math:pdl=%S/../../examples/xacc/fxmlir_xacc/xacc_to_upstream.pdl.mlir' %s \
// RUN:   | FileCheck %s --check-prefix=LOWERED --implicit-check-not=xacc.
// RUN: not fxmlir-opt %s 2>&1 | FileCheck %s --check-prefix=UNLOADED
// RUN: not fxmlir-opt --irdl-file=%S/Inputs/broken.irdl.mlir %s 2>&1 | FileCheck %s --check-prefix=BROKEN

// A dialect defined in IRDL loads at run time (`--irdl-file`, `fxmlir.config.dialects`): its
// ops parse and verify in fxmlir, print in every dump, and stock mlir-opt reads them with the
// same file. A PDL stage lowers them to upstream ops.

// PARSED:  func.func @scaled(
// PARSED:    %[[T:.*]] = "xacc.tanh"(%{{.*}}) : (tensor<4xf32>) -> tensor<4xf32>
// PARSED:    arith.mulf %[[T]], %[[T]]

// LOWERED: func.func @scaled(
// LOWERED:   math.tanh %{{.*}} : tensor<4xf32>

// UNLOADED: error: cannot parse the input
// BROKEN: error: dialect from {{.*}}broken.irdl.mlir: does not parse

func.func @scaled(%x: tensor<4xf32>) -> tensor<4xf32> {
  %t = "xacc.tanh"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %s = arith.mulf %t, %t : tensor<4xf32>
  return %s : tensor<4xf32>
}
