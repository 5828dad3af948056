// RUN: fxmlir-opt --target=skylake-avx512 --pipeline schedule --split-input-file %s \
// RUN:   | FileCheck %s --enable-var-scope --implicit-check-not=transform. --implicit-check-not=fxmlir.
// RUN: fxmlir-opt --target=skylake-avx512 --pipeline default --split-input-file %s | FileCheck %s --check-prefix=BUFFERS

// Elementwise chains after a product (src/pipeline/chains.rs), folded before the schedule into
// the one epilogue it fuses into the product's tile loop, also across the reshapes a `view`
// lowers to. Without the fold only the first op after the product joined its tile loop. An
// output that is then a reshape of the chain's value is written through a view of the output
// buffer: the tile loop stores into it, with no buffer of its own and no copy.

// mm -> view to 3-D -> bias (broadcast over the last dimension, which the view keeps) -> gelu
// -> residual sum: all three run on the accumulator tile, the residual read through a
// collapse to the product's shape; the result is reshaped back for the output.
// CHECK-LABEL: func.func @bias_gelu_residual(
// CHECK:         %[[VIEW:.*]] = memref.collapse_shape %arg4 {{\[\[}}0, 1], [2]] : memref<4x16x64xf32> into memref<64x64xf32>
// CHECK:         %[[RES:.*]] = tensor.collapse_shape %{{.*}} {{\[\[}}0, 1], [2]] : tensor<4x16x64xf32> into tensor<64x64xf32>
// CHECK:         %[[OUT:.*]] = scf.for
// CHECK:           %[[ACC:.*]] = scf.for {{.*}} -> (vector<8x32xf32>)
// CHECK:             vector.contract
// CHECK:           %[[BIAS:.*]] = vector.transfer_read {{.*}} : tensor<64xf32>, vector<8x32xf32>
// CHECK:           %[[R:.*]] = vector.transfer_read %[[RES]]{{.*}} : tensor<64x64xf32>, vector<8x32xf32>
// CHECK:           %[[SUM:.*]] = arith.addf %[[ACC]], %[[BIAS]] : vector<8x32xf32>
// CHECK:           math.erf {{.*}} : vector<8x32xf32>
// CHECK:           %[[G:.*]] = arith.mulf {{.*}} : vector<8x32xf32>
// CHECK:           arith.addf %[[R]], %[[G]] : vector<8x32xf32>
// CHECK-NOT:     linalg.
// CHECK:         bufferization.materialize_in_destination %[[OUT]] in restrict writable %[[VIEW]] : (tensor<64x64xf32>, memref<64x64xf32>)
// BUFFERS-LABEL: llvm.func @bias_gelu_residual(
// BUFFERS-NOT:     @malloc
// BUFFERS-NOT:     llvm.intr.memcpy
// BUFFERS:         llvm.return
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#last3 = affine_map<(d0, d1, d2) -> (d2)>
func.func @bias_gelu_residual(%arg0: memref<64x32xf32>, %arg1: memref<32x64xf32>, %arg2: memref<64xf32>, %arg3: memref<4x16x64xf32>, %arg4: memref<4x16x64xf32>) attributes {llvm.emit_c_interface} {
  %zero = arith.constant 0.000000e+00 : f32
  %x = bufferization.to_tensor %arg0 restrict : memref<64x32xf32> to tensor<64x32xf32>
  %w = bufferization.to_tensor %arg1 restrict : memref<32x64xf32> to tensor<32x64xf32>
  %b = bufferization.to_tensor %arg2 restrict : memref<64xf32> to tensor<64xf32>
  %r = bufferization.to_tensor %arg3 restrict : memref<4x16x64xf32> to tensor<4x16x64xf32>
  %e0 = tensor.empty() : tensor<64x64xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e0 : tensor<64x64xf32>) -> tensor<64x64xf32>
  %mm = linalg.matmul ins(%x, %w : tensor<64x32xf32>, tensor<32x64xf32>) outs(%f : tensor<64x64xf32>) -> tensor<64x64xf32>
  %flat = tensor.collapse_shape %mm [[0, 1]] : tensor<64x64xf32> into tensor<4096xf32>
  %v = tensor.expand_shape %flat [[0, 1, 2]] output_shape [4, 16, 64] : tensor<4096xf32> into tensor<4x16x64xf32>
  %e1 = tensor.empty() : tensor<4x16x64xf32>
  %biased = linalg.generic {indexing_maps = [#id3, #last3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%v, %b : tensor<4x16x64xf32>, tensor<64xf32>) outs(%e1 : tensor<4x16x64xf32>) {
  ^bb0(%in: f32, %bias: f32, %out: f32):
    %s = arith.addf %in, %bias : f32
    linalg.yield %s : f32
  } -> tensor<4x16x64xf32>
  %e2 = tensor.empty() : tensor<4x16x64xf32>
  %gelu = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%biased : tensor<4x16x64xf32>) outs(%e2 : tensor<4x16x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %c = arith.constant 0.707106769 : f32
    %h = arith.constant 5.000000e-01 : f32
    %one = arith.constant 1.000000e+00 : f32
    %a = arith.mulf %in, %h : f32
    %t = arith.mulf %in, %c : f32
    %erf = math.erf %t : f32
    %p = arith.addf %erf, %one : f32
    %g = arith.mulf %a, %p : f32
    linalg.yield %g : f32
  } -> tensor<4x16x64xf32>
  %e3 = tensor.empty() : tensor<4x16x64xf32>
  %sum = linalg.generic {indexing_maps = [#id3, #id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%r, %gelu : tensor<4x16x64xf32>, tensor<4x16x64xf32>) outs(%e3 : tensor<4x16x64xf32>) {
  ^bb0(%in: f32, %in2: f32, %out: f32):
    %s = arith.addf %in, %in2 : f32
    linalg.yield %s : f32
  } -> tensor<4x16x64xf32>
  bufferization.materialize_in_destination %sum in restrict writable %arg4 : (tensor<4x16x64xf32>, memref<4x16x64xf32>) -> ()
  return
}

// -----

// bmm -> view to 4-D -> scaling: the division joins the batched product's tile.
// CHECK-LABEL: func.func @scaled_scores(
// CHECK:         %[[VIEW:.*]] = memref.collapse_shape %arg2 {{\[\[}}0, 1], [2], [3]] : memref<2x4x16x16xf32> into memref<8x16x16xf32>
// CHECK:         %[[OUT:.*]] = scf.for
// CHECK:           vector.contract
// CHECK:           arith.divf {{.*}} : vector<8x16xf32>
// CHECK-NOT:     linalg.
// CHECK:         bufferization.materialize_in_destination %[[OUT]] in restrict writable %[[VIEW]]
// BUFFERS-LABEL: llvm.func @scaled_scores(
// BUFFERS-NOT:     @malloc
// BUFFERS-NOT:     llvm.intr.memcpy
// BUFFERS:         llvm.return
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
func.func @scaled_scores(%arg0: memref<8x16x32xf32>, %arg1: memref<8x32x16xf32>, %arg2: memref<2x4x16x16xf32>) attributes {llvm.emit_c_interface} {
  %zero = arith.constant 0.000000e+00 : f32
  %q = bufferization.to_tensor %arg0 restrict : memref<8x16x32xf32> to tensor<8x16x32xf32>
  %k = bufferization.to_tensor %arg1 restrict : memref<8x32x16xf32> to tensor<8x32x16xf32>
  %e0 = tensor.empty() : tensor<8x16x16xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e0 : tensor<8x16x16xf32>) -> tensor<8x16x16xf32>
  %bmm = linalg.batch_matmul ins(%q, %k : tensor<8x16x32xf32>, tensor<8x32x16xf32>) outs(%f : tensor<8x16x16xf32>) -> tensor<8x16x16xf32>
  %v = tensor.expand_shape %bmm [[0, 1], [2], [3]] output_shape [2, 4, 16, 16] : tensor<8x16x16xf32> into tensor<2x4x16x16xf32>
  %e1 = tensor.empty() : tensor<2x4x16x16xf32>
  %scaled = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%v : tensor<2x4x16x16xf32>) outs(%e1 : tensor<2x4x16x16xf32>) {
  ^bb0(%in: f32, %out: f32):
    %c = arith.constant 8.000000e+00 : f32
    %d = arith.divf %in, %c : f32
    linalg.yield %d : f32
  } -> tensor<2x4x16x16xf32>
  bufferization.materialize_in_destination %scaled in restrict writable %arg2 : (tensor<2x4x16x16xf32>, memref<2x4x16x16xf32>) -> ()
  return
}

// -----

// The view splits the last dimension, which the broadcast operand reads: the multiply is not
// folded and stays a generic of its own after the product.
// CHECK-LABEL: func.func @split_last_dim(
// CHECK:         vector.contract
// CHECK:         %[[V:.*]] = tensor.expand_shape %{{.*}} {{\[\[}}0], [1, 2]] output_shape [64, 8, 8]
// CHECK:         linalg.generic {{.*}} ins(%[[V]], %{{.*}} : tensor<64x8x8xf32>, tensor<8xf32>)
// CHECK:           arith.mulf
// The product's result needs a buffer of its own here; the multiply writes the output.
// BUFFERS-LABEL: llvm.func @split_last_dim(
// BUFFERS-COUNT-1: @malloc
// BUFFERS-NOT:     llvm.intr.memcpy
// BUFFERS:         llvm.return
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#last3 = affine_map<(d0, d1, d2) -> (d2)>
func.func @split_last_dim(%arg0: memref<64x32xf32>, %arg1: memref<32x64xf32>, %arg2: memref<8xf32>, %arg3: memref<64x8x8xf32>) attributes {llvm.emit_c_interface} {
  %zero = arith.constant 0.000000e+00 : f32
  %x = bufferization.to_tensor %arg0 restrict : memref<64x32xf32> to tensor<64x32xf32>
  %w = bufferization.to_tensor %arg1 restrict : memref<32x64xf32> to tensor<32x64xf32>
  %s = bufferization.to_tensor %arg2 restrict : memref<8xf32> to tensor<8xf32>
  %e0 = tensor.empty() : tensor<64x64xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e0 : tensor<64x64xf32>) -> tensor<64x64xf32>
  %mm = linalg.matmul ins(%x, %w : tensor<64x32xf32>, tensor<32x64xf32>) outs(%f : tensor<64x64xf32>) -> tensor<64x64xf32>
  %v = tensor.expand_shape %mm [[0], [1, 2]] output_shape [64, 8, 8] : tensor<64x64xf32> into tensor<64x8x8xf32>
  %e1 = tensor.empty() : tensor<64x8x8xf32>
  %scaled = linalg.generic {indexing_maps = [#id3, #last3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%v, %s : tensor<64x8x8xf32>, tensor<8xf32>) outs(%e1 : tensor<64x8x8xf32>) {
  ^bb0(%in: f32, %in2: f32, %out: f32):
    %m = arith.mulf %in, %in2 : f32
    linalg.yield %m : f32
  } -> tensor<64x8x8xf32>
  bufferization.materialize_in_destination %scaled in restrict writable %arg3 : (tensor<64x8x8xf32>, memref<64x8x8xf32>) -> ()
  return
}

// -----

// A view of the product that is both a graph output and another op's input (as in a training
// graph, which saves activations for the backward): neither the chain nor the output takes the
// view, which stays for both users.
// CHECK-LABEL: func.func @shared_view(
// CHECK:         vector.contract
// CHECK:         %[[V:.*]] = tensor.expand_shape %{{.*}} {{\[\[}}0, 1], [2]] output_shape [4, 16, 64]
// CHECK:         linalg.generic {{.*}} ins(%[[V]] : tensor<4x16x64xf32>)
// CHECK:         bufferization.materialize_in_destination %[[V]] in restrict writable %arg2
// CHECK:         bufferization.materialize_in_destination %{{.*}} in restrict writable %arg3
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
func.func @shared_view(%arg0: memref<64x32xf32>, %arg1: memref<32x64xf32>, %arg2: memref<4x16x64xf32>, %arg3: memref<4x16x64xf32>) attributes {llvm.emit_c_interface} {
  %zero = arith.constant 0.000000e+00 : f32
  %x = bufferization.to_tensor %arg0 restrict : memref<64x32xf32> to tensor<64x32xf32>
  %w = bufferization.to_tensor %arg1 restrict : memref<32x64xf32> to tensor<32x64xf32>
  %e0 = tensor.empty() : tensor<64x64xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e0 : tensor<64x64xf32>) -> tensor<64x64xf32>
  %mm = linalg.matmul ins(%x, %w : tensor<64x32xf32>, tensor<32x64xf32>) outs(%f : tensor<64x64xf32>) -> tensor<64x64xf32>
  %v = tensor.expand_shape %mm [[0, 1], [2]] output_shape [4, 16, 64] : tensor<64x64xf32> into tensor<4x16x64xf32>
  %e1 = tensor.empty() : tensor<4x16x64xf32>
  %relu = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%v : tensor<4x16x64xf32>) outs(%e1 : tensor<4x16x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.maximumf %in, %zero : f32
    linalg.yield %m : f32
  } -> tensor<4x16x64xf32>
  bufferization.materialize_in_destination %v in restrict writable %arg2 : (tensor<4x16x64xf32>, memref<4x16x64xf32>) -> ()
  bufferization.materialize_in_destination %relu in restrict writable %arg3 : (tensor<4x16x64xf32>, memref<4x16x64xf32>) -> ()
  return
}

// -----

// The same chain over a dynamic number of rows (a symbolic batch): the view's expansion takes
// its size from the graph, the residual is read through a collapse to the product's shape (no
// size to compute), and the output is written through a collapsed view of its buffer: one
// epilogue on the accumulator tile in the full tiles and in the rows the peel leaves.
// CHECK-LABEL: func.func @rows_bias_gelu_residual(
// CHECK:         %[[VIEW:.*]] = memref.collapse_shape %arg4 {{\[\[}}0, 1], [2]] : memref<?x16x64xf32> into memref<?x64xf32>
// CHECK:         %[[RES:.*]] = tensor.collapse_shape %{{.*}} {{\[\[}}0, 1], [2]] : tensor<?x16x64xf32> into tensor<?x64xf32>
// CHECK:         %[[FULL:.*]] = scf.for
// CHECK:           vector.contract {{.*}} : vector<8x4xf32>, vector<4x32xf32> into vector<8x32xf32>
// CHECK:           vector.transfer_read %[[RES]]{{.*}} : tensor<?x64xf32>, vector<8x32xf32>
// CHECK:           math.erf {{.*}} : vector<8x32xf32>
// CHECK:         %[[OUT:.*]] = scf.for {{.*}} iter_args(%{{.*}} = %[[FULL]])
// CHECK:           vector.transfer_read %[[RES]]{{.*}} : tensor<?x64xf32>, vector<32xf32>
// CHECK:           math.erf {{.*}} : vector<32xf32>
// CHECK-NOT:     linalg.
// CHECK:         bufferization.materialize_in_destination %[[OUT]] in restrict writable %[[VIEW]] : (tensor<?x64xf32>, memref<?x64xf32>)
// BUFFERS-LABEL: llvm.func @rows_bias_gelu_residual(
// BUFFERS-NOT:     @malloc
// BUFFERS-NOT:     llvm.intr.memcpy
// BUFFERS:         llvm.return
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#last2 = affine_map<(d0, d1) -> (d1)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
func.func @rows_bias_gelu_residual(%arg0: memref<?x32xf32>, %arg1: memref<32x64xf32>, %arg2: memref<64xf32>, %arg3: memref<?x16x64xf32>, %arg4: memref<?x16x64xf32>) attributes {llvm.emit_c_interface} {
  %zero = arith.constant 0.000000e+00 : f32
  %c0 = arith.constant 0 : index
  %x = bufferization.to_tensor %arg0 restrict : memref<?x32xf32> to tensor<?x32xf32>
  %w = bufferization.to_tensor %arg1 restrict : memref<32x64xf32> to tensor<32x64xf32>
  %b = bufferization.to_tensor %arg2 restrict : memref<64xf32> to tensor<64xf32>
  %r = bufferization.to_tensor %arg3 restrict : memref<?x16x64xf32> to tensor<?x16x64xf32>
  %rows = tensor.dim %x, %c0 : tensor<?x32xf32>
  %batch = tensor.dim %r, %c0 : tensor<?x16x64xf32>
  %e0 = tensor.empty(%rows) : tensor<?x64xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e0 : tensor<?x64xf32>) -> tensor<?x64xf32>
  %mm = linalg.matmul ins(%x, %w : tensor<?x32xf32>, tensor<32x64xf32>) outs(%f : tensor<?x64xf32>) -> tensor<?x64xf32>
  %e1 = tensor.empty(%rows) : tensor<?x64xf32>
  %biased = linalg.generic {indexing_maps = [#id2, #last2, #id2], iterator_types = ["parallel", "parallel"]} ins(%mm, %b : tensor<?x64xf32>, tensor<64xf32>) outs(%e1 : tensor<?x64xf32>) {
  ^bb0(%in: f32, %bias: f32, %out: f32):
    %s = arith.addf %in, %bias : f32
    linalg.yield %s : f32
  } -> tensor<?x64xf32>
  %v = tensor.expand_shape %biased [[0, 1], [2]] output_shape [%batch, 16, 64] : tensor<?x64xf32> into tensor<?x16x64xf32>
  %e2 = tensor.empty(%batch) : tensor<?x16x64xf32>
  %gelu = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%v : tensor<?x16x64xf32>) outs(%e2 : tensor<?x16x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %c = arith.constant 0.707106769 : f32
    %h = arith.constant 5.000000e-01 : f32
    %one = arith.constant 1.000000e+00 : f32
    %a = arith.mulf %in, %h : f32
    %t = arith.mulf %in, %c : f32
    %erf = math.erf %t : f32
    %p = arith.addf %erf, %one : f32
    %g = arith.mulf %a, %p : f32
    linalg.yield %g : f32
  } -> tensor<?x16x64xf32>
  %e3 = tensor.empty(%batch) : tensor<?x16x64xf32>
  %sum = linalg.generic {indexing_maps = [#id3, #id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%r, %gelu : tensor<?x16x64xf32>, tensor<?x16x64xf32>) outs(%e3 : tensor<?x16x64xf32>) {
  ^bb0(%in: f32, %in2: f32, %out: f32):
    %s = arith.addf %in, %in2 : f32
    linalg.yield %s : f32
  } -> tensor<?x16x64xf32>
  bufferization.materialize_in_destination %sum in restrict writable %arg4 : (tensor<?x16x64xf32>, memref<?x16x64xf32>) -> ()
  return
}
