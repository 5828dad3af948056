// RUN: fxmlir-opt --pipeline fusion --add-stage 'after:fusion:sine:pdl=%S/Inputs/tanh_to_sin.pdl.mlir' %s \
// RUN:   | FileCheck %s --check-prefix=PDL --implicit-check-not=math.tanh
// RUN: fxmlir-opt --pipeline fusion --add-stage 'before:fusion:generalize:transform=%S/Inputs/generalize.transform.mlir' %s \
// RUN:   | FileCheck %s --check-prefix=TRANSFORM --implicit-check-not=linalg.matmul --implicit-check-not=transform.
// RUN: fxmlir-opt --pipeline fusion --add-stage 'replace:fusion:cse:passes=builtin.module(cse)' %s \
// RUN:   | FileCheck %s --check-prefix=REPLACED
// RUN: fxmlir-opt --target=znver3 --pipeline fusion --add-stage 'before:fusion:mine:work=schedule' %s \
// RUN:   | FileCheck %s --check-prefix=WORK --implicit-check-not=linalg.matmul
// RUN: not fxmlir-opt --pipeline fusion --add-stage 'before:fusion:mine:work=tiling' %s 2>&1 \
// RUN:   | FileCheck %s --check-prefix=BAD-WORK
// RUN: fxmlir-opt --pipeline fusion --add-stage 'before:fusion:cse:passes=builtin.module(cse)' --add-stage remove:fusion %s \
// RUN:   | FileCheck %s --check-prefix=REMOVED
// RUN: not fxmlir-opt --pipeline fusion --add-stage remove:tiling %s 2>&1 \
// RUN:   | FileCheck %s --check-prefix=REMOVE-UNKNOWN
// RUN: not fxmlir-opt --pipeline fusion --add-stage 'after:tiling:x:passes=builtin.module(cse)' %s 2>&1 \
// RUN:   | FileCheck %s --check-prefix=ANCHOR
// RUN: not fxmlir-opt --pipeline fusion --add-stage 'after:fusion:bad:pdl=%S/Inputs/generalize.transform.mlir' %s 2>&1 \
// RUN:   | FileCheck %s --check-prefix=BAD-PDL
// RUN: not fxmlir-opt --pipeline fusion --add-stage 'after:fusion:bad:passes=builtin.module(no-such-pass)' %s 2>&1 \
// RUN:   | FileCheck %s --check-prefix=BAD-PASSES
// RUN: not fxmlir-opt --pipeline fusion --add-stage 'after:fusion:dumps/x:passes=builtin.module(cse)' %s 2>&1 \
// RUN:   | FileCheck %s --check-prefix=BAD-NAME
// RUN: not fxmlir-opt --pipeline fusion --add-stage 'beside:fusion:x:passes=builtin.module(cse)' %s 2>&1 \
// RUN:   | FileCheck %s --check-prefix=BAD-PLACEMENT
// RUN: not fxmlir-opt --add-stage 'after:fusion:x:passes=builtin.module(cse)' %s 2>&1 \
// RUN:   | FileCheck %s --check-prefix=NO-PIPELINE

// Stages of one's own go before, after or in place of a named stage: a textual pass
// pipeline, a transform script (appended, interpreted, erased), PDL patterns (applied
// greedily to the whole module), or the work of one of fxmlir's stages. Mistakes are errors
// naming the stage.

// PDL:       func.func @product_then_tanh(
// PDL:         linalg.matmul
// PDL:         math.sin

// TRANSFORM:       func.func @product_then_tanh(
// TRANSFORM:         linalg.generic
// TRANSFORM:           arith.mulf
// TRANSFORM:           arith.addf
// TRANSFORM:         math.tanh

// With fusion replaced, the elementwise op stays a generic of its own after the product.
// REPLACED:       linalg.matmul
// REPLACED-NEXT:  linalg.generic

// A stage of one's own may run one of fxmlir's stages' Rust work (`work=`): here the
// schedule's, with its passes, so the product is tiled and vectorised.
// WORK:       func.func @product_then_tanh(
// WORK:         vector.contract

// BAD-WORK: error: invalid pass pipeline `mine`: no work `tiling`: fxmlir's stages with work of their own are expand, schedule, fusion, parallel, bufferize, outline, loops, llvm

// `remove:STAGE` takes a stage out: with fusion gone, the elementwise op stays a generic of
// its own after the product.
// REMOVED:       linalg.matmul
// REMOVED-NEXT:  linalg.generic
// REMOVE-UNKNOWN: error: invalid pass pipeline `fusion`: no stage `tiling` to remove; stages: fusion

// ANCHOR: error: invalid pass pipeline `fusion`: no stage `tiling` to put `x` after; stages: fusion
// BAD-PDL: pipeline stage `bad` failed:
// BAD-PDL: the stage's PDL patterns
// BAD-PASSES: error: invalid pass pipeline `builtin.module(no-such-pass)`
// BAD-NAME: error: invalid pass pipeline `fusion`: stage name `dumps/x`: use letters, digits, `-` and `_`
// BAD-PLACEMENT: placement `beside`: expected before, after, replace or remove
// NO-PIPELINE: error: --add-stage edits a named pipeline: give it with --pipeline

func.func @product_then_tanh(%a: tensor<8x16xf32>, %b: tensor<16x32xf32>) -> tensor<8x32xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<8x32xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<8x32xf32>) -> tensor<8x32xf32>
  %p = linalg.matmul ins(%a, %b : tensor<8x16xf32>, tensor<16x32xf32>) outs(%init : tensor<8x32xf32>) -> tensor<8x32xf32>
  %t = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%p : tensor<8x32xf32>) outs(%empty : tensor<8x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %y = math.tanh %in : f32
    linalg.yield %y : f32
  } -> tensor<8x32xf32>
  return %t : tensor<8x32xf32>
}
