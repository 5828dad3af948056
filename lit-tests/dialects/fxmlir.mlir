// RUN: fxmlir-opt %s | FileCheck %s --check-prefix=PARSED
// RUN: mlir-opt --irdl-file=%S/../../dialects/fxmlir.irdl.mlir %s | FileCheck %s --check-prefix=PARSED
// RUN: fxmlir-opt --pipeline expand %s | FileCheck %s --check-prefix=EXPANDED
// RUN: fxmlir-opt --pipeline expand \
// RUN:     --add-stage 'before:expand:vendor:pdl=%S/Inputs/vendor_mm_pairs.pdl.mlir' %s \
// RUN:   | FileCheck %s --check-prefix=VENDOR
// RUN: not fxmlir-opt --pipeline expand %S/Inputs/missing_decomposition.mlir 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not fxmlir-opt %S/Inputs/no_decomposition.mlir 2>&1 | FileCheck %s --check-prefix=UNNAMED

// fxmlir's own dialect (dialects/fxmlir.irdl.mlir): each op stands for a node lowered whole,
// its `decomposition` a private function that computes it. fxmlir loads the dialect into
// every context; stock mlir-opt parses it from the IRDL file. The `expand` stage inlines the
// decompositions (and drops them); a stage placed before it can replace the op instead, and
// the decomposition it leaves unused is dropped all the same.

// PARSED-LABEL: func.func @pairs(
// PARSED:         "fxmlir.mm_pairs"(%{{.*}}, %{{.*}}) {decomposition = @pairs.decomposition} : (tensor<4x8xbf16>, tensor<4x16x2xbf16>) -> tensor<4x16xf32>
// PARSED:       func.func private @pairs.decomposition(

// EXPANDED-LABEL: func.func @pairs(
// EXPANDED-SAME:    %[[A:[a-zA-Z0-9_]+]]: tensor<4x8xbf16>{{.*}}, %[[P:[a-zA-Z0-9_]+]]: tensor<4x16x2xbf16>
// EXPANDED:         %[[FLAT:.*]] = tensor.collapse_shape %[[A]]
// EXPANDED:         %[[MM:.*]] = linalg.contract {{.*}} ins(%{{.*}}, %[[P]] : tensor<4x4x2xbf16>, tensor<4x16x2xbf16>)
// EXPANDED:         return %[[MM]]
// EXPANDED-NOT:   fxmlir.
// EXPANDED-NOT:   decomposition

// VENDOR-LABEL: func.func @pairs(
// VENDOR:         %[[MM:.*]] = call @vendor_mm_pairs(%{{.*}}, %{{.*}}) : (tensor<4x8xbf16>, tensor<4x16x2xbf16>) -> tensor<4x16xf32>
// VENDOR:         return %[[MM]]
// VENDOR-NOT:   decomposition
// VENDOR-NOT:   linalg.contract

// MISSING: error: pipeline stage `expand` failed:
// MISSING-NEXT: fxmlir.mm_pairs at loc("mm_pairs (n1)"): its decomposition @gone is not a function

// UNNAMED: error: cannot parse the input:
// UNNAMED-NEXT: 'fxmlir.mm_pairs' op attribute "decomposition" is expected but not provided

#lhs = affine_map<(d0, d1, d2, d3) -> (d0, d2, d3)>
#rhs = affine_map<(d0, d1, d2, d3) -> (d2, d1, d3)>
#out = affine_map<(d0, d1, d2, d3) -> (d0, d1)>
module {
  func.func @pairs(%a: tensor<4x8xbf16>, %p: tensor<4x16x2xbf16>) -> tensor<4x16xf32> {
    %0 = "fxmlir.mm_pairs"(%a, %p) {decomposition = @pairs.decomposition} : (tensor<4x8xbf16>, tensor<4x16x2xbf16>) -> tensor<4x16xf32>
    return %0 : tensor<4x16xf32>
  }
  func.func private @vendor_mm_pairs(tensor<4x8xbf16>, tensor<4x16x2xbf16>) -> tensor<4x16xf32>
  func.func private @pairs.decomposition(%a: tensor<4x8xbf16>, %p: tensor<4x16x2xbf16>) -> tensor<4x16xf32> {
    %flat = tensor.collapse_shape %a [[0, 1]] : tensor<4x8xbf16> into tensor<32xbf16>
    %pairs = tensor.expand_shape %flat [[0, 1, 2]] output_shape [4, 4, 2] : tensor<32xbf16> into tensor<4x4x2xbf16>
    %zero = arith.constant 0.0 : f32
    %empty = tensor.empty() : tensor<4x16xf32>
    %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<4x16xf32>) -> tensor<4x16xf32>
    %mm = linalg.contract indexing_maps = [#lhs, #rhs, #out] ins(%pairs, %p : tensor<4x4x2xbf16>, tensor<4x16x2xbf16>) outs(%acc : tensor<4x16xf32>) -> tensor<4x16xf32>
    return %mm : tensor<4x16xf32>
  }
}
