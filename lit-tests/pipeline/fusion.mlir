// RUN: fxmlir-opt --pipeline fusion --split-input-file %s | FileCheck %s --enable-var-scope

// The fusion stage (linalg-fuse-elementwise-ops, eliminate-empty-tensors, canonicalize, cse) on
// linalg-on-tensors as the importer emits it: elementwise producers merge into their consumers,
// named ops stay, and the op producing an output writes the output buffer itself.

// A chain of three elementwise generics (add with a broadcast row, relu, scale) becomes one
// generic whose body holds all three ops; the constants are hoisted out of the body.
// CHECK-DAG: #[[$ID:.*]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-DAG: #[[$ROW:.*]] = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func @chain(
// CHECK-SAME:      %[[ARG0:[a-zA-Z0-9_]+]]: memref<4x8xf32>
// CHECK-SAME:      %[[ARG1:[a-zA-Z0-9_]+]]: memref<8xf32>
// CHECK-SAME:      %[[ARG2:[a-zA-Z0-9_]+]]: memref<4x8xf32>
// CHECK-DAG:   %[[TWO:.*]] = arith.constant 2.000000e+00 : f32
// CHECK-DAG:   %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-DAG:   %[[X:.*]] = bufferization.to_tensor %[[ARG0]] restrict
// CHECK-DAG:   %[[Y:.*]] = bufferization.to_tensor %[[ARG1]] restrict
// CHECK:       %[[INIT:.*]] = bufferization.to_tensor %[[ARG2]] restrict writable
// CHECK:       %[[R:.*]] = linalg.generic {indexing_maps = [#[[$ID]], #[[$ROW]], #[[$ID]]], iterator_types = ["parallel", "parallel"]}
// CHECK-SAME:      ins(%[[X]], %[[Y]] : tensor<4x8xf32>, tensor<8xf32>) outs(%[[INIT]] : tensor<4x8xf32>)
// CHECK-NEXT:  ^bb0(%[[A:[a-zA-Z0-9_]+]]: f32{{[^,]*}}, %[[B:[a-zA-Z0-9_]+]]: f32{{[^,]*}}, %{{[a-zA-Z0-9_]+}}: f32
// CHECK-NEXT:    %[[S:.*]] = arith.addf %[[A]], %[[B]] : f32
// CHECK-NEXT:    %[[M:.*]] = arith.maximumf %[[S]], %[[ZERO]] : f32
// CHECK-NEXT:    %[[P:.*]] = arith.mulf %[[M]], %[[TWO]] : f32
// CHECK-NEXT:    linalg.yield %[[P]] : f32
// CHECK-NOT:   linalg.generic
// CHECK:       bufferization.materialize_in_destination %[[R]] in writable %[[ARG2]]
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
func.func @chain(%arg0: memref<4x8xf32>, %arg1: memref<8xf32>, %arg2: memref<4x8xf32>) attributes {llvm.emit_c_interface} {
  %0 = bufferization.to_tensor %arg0 restrict : memref<4x8xf32> to tensor<4x8xf32>
  %1 = bufferization.to_tensor %arg1 restrict : memref<8xf32> to tensor<8xf32>
  %2 = tensor.empty() : tensor<4x8xf32>
  %3 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%0, %1 : tensor<4x8xf32>, tensor<8xf32>) outs(%2 : tensor<4x8xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %8 = arith.addf %in, %in_0 : f32
    linalg.yield %8 : f32
  } -> tensor<4x8xf32>
  %4 = tensor.empty() : tensor<4x8xf32>
  %5 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%3 : tensor<4x8xf32>) outs(%4 : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %cst = arith.constant 0.000000e+00 : f32
    %8 = arith.maximumf %in, %cst : f32
    linalg.yield %8 : f32
  } -> tensor<4x8xf32>
  %6 = tensor.empty() : tensor<4x8xf32>
  %7 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%5 : tensor<4x8xf32>) outs(%6 : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %cst = arith.constant 2.000000e+00 : f32
    %8 = arith.mulf %in, %cst : f32
    linalg.yield %8 : f32
  } -> tensor<4x8xf32>
  bufferization.materialize_in_destination %7 in restrict writable %arg2 : (tensor<4x8xf32>, memref<4x8xf32>) -> ()
  return
}

// -----

// An elementwise producer fuses into a reduction consumer: exp is computed inside the sum.
// CHECK-DAG: #[[$ID:.*]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-DAG: #[[$RED:.*]] = affine_map<(d0, d1) -> (d0)>
// CHECK-LABEL: func.func @sum_of_exp(
// CHECK-SAME:      %[[ARG0:[a-zA-Z0-9_]+]]: memref<4x8xf32>
// CHECK:       %[[X:.*]] = bufferization.to_tensor %[[ARG0]]
// CHECK:       %[[ACC:.*]] = linalg.fill
// CHECK:       %[[R:.*]] = linalg.generic {indexing_maps = [#[[$ID]], #[[$RED]]], iterator_types = ["parallel", "reduction"]}
// CHECK-SAME:      ins(%[[X]] : tensor<4x8xf32>) outs(%[[ACC]] : tensor<4xf32>)
// CHECK-NEXT:  ^bb0(%[[IN:[a-zA-Z0-9_]+]]: f32{{[^,]*}}, %[[OUT:[a-zA-Z0-9_]+]]: f32
// CHECK-NEXT:    %[[E:.*]] = math.exp %[[IN]] : f32
// CHECK-NEXT:    %[[S:.*]] = arith.addf %[[OUT]], %[[E]] : f32
// CHECK-NEXT:    linalg.yield %[[S]] : f32
// CHECK-NOT:   linalg.generic
// CHECK:       bufferization.materialize_in_destination %[[R]]
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
func.func @sum_of_exp(%arg0: memref<4x8xf32>, %arg1: memref<4xf32>) attributes {llvm.emit_c_interface} {
  %0 = bufferization.to_tensor %arg0 restrict : memref<4x8xf32> to tensor<4x8xf32>
  %1 = tensor.empty() : tensor<4x8xf32>
  %2 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%0 : tensor<4x8xf32>) outs(%1 : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %6 = math.exp %in : f32
    linalg.yield %6 : f32
  } -> tensor<4x8xf32>
  %cst = arith.constant 0.000000e+00 : f32
  %3 = tensor.empty() : tensor<4xf32>
  %4 = linalg.fill ins(%cst : f32) outs(%3 : tensor<4xf32>) -> tensor<4xf32>
  %5 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%2 : tensor<4x8xf32>) outs(%4 : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %6 = arith.addf %out, %in : f32
    linalg.yield %6 : f32
  } -> tensor<4xf32>
  bufferization.materialize_in_destination %5 in restrict writable %arg1 : (tensor<4xf32>, memref<4xf32>) -> ()
  return
}

// -----

// linear + relu: the matmul stays a named op; its bias epilogue and the relu fuse into one
// generic. The duplicate 0.0 constants and tensor.empty ops are CSE'd.
// CHECK-LABEL: func.func @linear_relu(
// CHECK:       %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NOT:   arith.constant
// CHECK:       %[[EMPTY:.*]] = tensor.empty() : tensor<4x16xf32>
// CHECK-NOT:   tensor.empty
// CHECK:       %[[ACC:.*]] = linalg.fill ins(%[[ZERO]] : f32) outs(%[[EMPTY]] : tensor<4x16xf32>)
// CHECK:       %[[MM:.*]] = linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<4x8xf32>, tensor<8x16xf32>) outs(%[[ACC]] : tensor<4x16xf32>)
// CHECK:       %[[R:.*]] = linalg.generic
// CHECK-SAME:      ins(%[[MM]], %{{.*}} : tensor<4x16xf32>, tensor<16xf32>)
// CHECK:         arith.addf
// CHECK-NEXT:    arith.maximumf %{{.*}}, %[[ZERO]] : f32
// CHECK-NOT:   linalg.generic
// CHECK:       bufferization.materialize_in_destination %[[R]]
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
func.func @linear_relu(%arg0: memref<4x8xf32>, %arg1: memref<8x16xf32>, %arg2: memref<16xf32>, %arg3: memref<4x16xf32>) attributes {llvm.emit_c_interface} {
  %0 = bufferization.to_tensor %arg0 restrict : memref<4x8xf32> to tensor<4x8xf32>
  %1 = bufferization.to_tensor %arg1 restrict : memref<8x16xf32> to tensor<8x16xf32>
  %2 = bufferization.to_tensor %arg2 restrict : memref<16xf32> to tensor<16xf32>
  %cst = arith.constant 0.000000e+00 : f32
  %3 = tensor.empty() : tensor<4x16xf32>
  %4 = linalg.fill ins(%cst : f32) outs(%3 : tensor<4x16xf32>) -> tensor<4x16xf32>
  %5 = linalg.matmul ins(%0, %1 : tensor<4x8xf32>, tensor<8x16xf32>) outs(%4 : tensor<4x16xf32>) -> tensor<4x16xf32>
  %6 = tensor.empty() : tensor<4x16xf32>
  %7 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%5, %2 : tensor<4x16xf32>, tensor<16xf32>) outs(%6 : tensor<4x16xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %10 = arith.addf %in, %in_0 : f32
    linalg.yield %10 : f32
  } -> tensor<4x16xf32>
  %8 = tensor.empty() : tensor<4x16xf32>
  %9 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%7 : tensor<4x16xf32>) outs(%8 : tensor<4x16xf32>) {
  ^bb0(%in: f32, %out: f32):
    %cst_0 = arith.constant 0.000000e+00 : f32
    %10 = arith.maximumf %in, %cst_0 : f32
    linalg.yield %10 : f32
  } -> tensor<4x16xf32>
  bufferization.materialize_in_destination %9 in restrict writable %arg3 : (tensor<4x16xf32>, memref<4x16xf32>) -> ()
  return
}

// -----

// A producer with a second, non-generic use (the slice of an output) is not fused away.
// CHECK-LABEL: func.func @shared_producer(
// CHECK:       %[[E:.*]] = linalg.generic
// CHECK:         math.exp
// CHECK:       %[[S:.*]] = tensor.extract_slice %[[E]][0, 0] [4, 4] [1, 1]
// CHECK:       %[[N:.*]] = linalg.generic {{.*}} ins(%[[E]] : tensor<4x8xf32>)
// CHECK:         arith.negf
// CHECK:       bufferization.materialize_in_destination %[[S]]
// CHECK:       bufferization.materialize_in_destination %[[N]]
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @shared_producer(%arg0: memref<4x8xf32>, %arg1: memref<4x4xf32>, %arg2: memref<4x8xf32>) attributes {llvm.emit_c_interface} {
  %0 = bufferization.to_tensor %arg0 restrict : memref<4x8xf32> to tensor<4x8xf32>
  %1 = tensor.empty() : tensor<4x8xf32>
  %2 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%0 : tensor<4x8xf32>) outs(%1 : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %5 = math.exp %in : f32
    linalg.yield %5 : f32
  } -> tensor<4x8xf32>
  %extracted_slice = tensor.extract_slice %2[0, 0] [4, 4] [1, 1] : tensor<4x8xf32> to tensor<4x4xf32>
  %3 = tensor.empty() : tensor<4x8xf32>
  %4 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%2 : tensor<4x8xf32>) outs(%3 : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %5 = arith.negf %in : f32
    linalg.yield %5 : f32
  } -> tensor<4x8xf32>
  bufferization.materialize_in_destination %extracted_slice in restrict writable %arg1 : (tensor<4x4xf32>, memref<4x4xf32>) -> ()
  bufferization.materialize_in_destination %4 in restrict writable %arg2 : (tensor<4x8xf32>, memref<4x8xf32>) -> ()
  return
}

// -----

// A pooled tensor placed into a padded canvas that the next layer's lowering built after the
// pool (columns 16 to 32, the rest zero): the canvas is built first, and the pool's -inf init
// is a slice of it, so the pool computes into the canvas and no tensor of its own remains.
// CHECK-LABEL: func.func @placed_after_its_producer(
// CHECK:       %[[CANVAS:.*]] = bufferization.alloc_tensor() : tensor<4x32xf32>
// CHECK:       %[[TAIL:.*]] = tensor.insert_slice %{{.*}} into %[[CANVAS]][0, 16] [4, 16] [1, 1]
// CHECK:       %[[PART:.*]] = tensor.extract_slice %[[TAIL]][0, 0] [4, 16] [1, 1]
// CHECK:       %[[INIT:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%[[PART]] : tensor<4x16xf32>)
// CHECK-NOT:   tensor.empty() : tensor<4x16xf32>
// CHECK:       %[[POOL:.*]] = linalg.generic {{.*}} outs(%[[INIT]] : tensor<4x16xf32>)
// CHECK:       bufferization.materialize_in_destination %[[POOL]] in %[[PART]]
#in = affine_map<(d0, d1, d2) -> (d0, d1 + d2)>
#window = affine_map<(d0, d1, d2) -> (d2)>
#out = affine_map<(d0, d1, d2) -> (d0, d1)>
func.func @placed_after_its_producer(%arg0: memref<4x18xf32>, %arg1: memref<4x32xf32>) {
  %x = bufferization.to_tensor %arg0 restrict : memref<4x18xf32> to tensor<4x18xf32>
  %ninf = arith.constant 0xFF800000 : f32
  %e = tensor.empty() : tensor<4x16xf32>
  %init = linalg.fill ins(%ninf : f32) outs(%e : tensor<4x16xf32>) -> tensor<4x16xf32>
  %w = tensor.empty() : tensor<3xf32>
  %pool = linalg.generic {indexing_maps = [#in, #window, #out], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x, %w : tensor<4x18xf32>, tensor<3xf32>) outs(%init : tensor<4x16xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.maximumf %a, %o : f32
    linalg.yield %m : f32
  } -> tensor<4x16xf32>
  %zero = arith.constant 0.0 : f32
  %canvas = bufferization.alloc_tensor() : tensor<4x32xf32>
  %tail = tensor.extract_slice %canvas[0, 16] [4, 16] [1, 1] : tensor<4x32xf32> to tensor<4x16xf32>
  %tail0 = linalg.fill ins(%zero : f32) outs(%tail : tensor<4x16xf32>) -> tensor<4x16xf32>
  %c1 = tensor.insert_slice %tail0 into %canvas[0, 16] [4, 16] [1, 1] : tensor<4x16xf32> into tensor<4x32xf32>
  %part = tensor.extract_slice %c1[0, 0] [4, 16] [1, 1] : tensor<4x32xf32> to tensor<4x16xf32>
  %placed = bufferization.materialize_in_destination %pool in %part : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %c2 = tensor.insert_slice %placed into %c1[0, 0] [4, 16] [1, 1] : tensor<4x16xf32> into tensor<4x32xf32>
  bufferization.materialize_in_destination %c2 in restrict writable %arg1 : (tensor<4x32xf32>, memref<4x32xf32>) -> ()
  return
}

// -----

// A concatenation of two computed parts: each part's destination is the concatenation with
// the parts before it, so the destination of the second part, computed first here, holds the
// first part, a computation after the second part's empty tensor: it is not moved (that
// would move a computation), and the second part keeps a tensor of its own, copied in. The
// first part computes into its slice.
// CHECK-LABEL: func.func @placed_before_an_earlier_part(
// CHECK:       %[[E:.*]] = tensor.empty() : tensor<4x8xf32>
// CHECK:       %[[EXP:.*]] = linalg.generic {{.*}} outs(%[[E]] : tensor<4x8xf32>)
// CHECK:         math.exp
// CHECK:       %[[CAT:.*]] = bufferization.alloc_tensor() : tensor<8x8xf32>
// CHECK:       %[[SLICE:.*]] = tensor.extract_slice %[[CAT]][0, 0] [4, 8] [1, 1]
// CHECK:       %[[NEG:.*]] = linalg.generic {{.*}} outs(%[[SLICE]] : tensor<4x8xf32>)
// CHECK:         arith.negf
// CHECK:       %[[FIRST:.*]] = tensor.insert_slice %[[NEG]] into %[[CAT]][0, 0] [4, 8] [1, 1]
// CHECK:       tensor.insert_slice %[[EXP]] into %[[FIRST]][4, 0] [4, 8] [1, 1]
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @placed_before_an_earlier_part(%arg0: memref<4x8xf32>, %arg1: memref<8x8xf32>) {
  %x = bufferization.to_tensor %arg0 restrict : memref<4x8xf32> to tensor<4x8xf32>
  %e1 = tensor.empty() : tensor<4x8xf32>
  %exp = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<4x8xf32>) outs(%e1 : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %n = math.exp %in : f32
    linalg.yield %n : f32
  } -> tensor<4x8xf32>
  %e0 = tensor.empty() : tensor<4x8xf32>
  %neg = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<4x8xf32>) outs(%e0 : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %n = arith.negf %in : f32
    linalg.yield %n : f32
  } -> tensor<4x8xf32>
  %cat = bufferization.alloc_tensor() : tensor<8x8xf32>
  %first = tensor.insert_slice %neg into %cat[0, 0] [4, 8] [1, 1] : tensor<4x8xf32> into tensor<8x8xf32>
  %both = tensor.insert_slice %exp into %first[4, 0] [4, 8] [1, 1] : tensor<4x8xf32> into tensor<8x8xf32>
  bufferization.materialize_in_destination %both in restrict writable %arg1 : (tensor<8x8xf32>, memref<8x8xf32>) -> ()
  return
}
