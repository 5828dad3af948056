// RUN: fxmlir-opt --pipeline parallel --threads 2 --split-input-file %s | FileCheck %s --enable-var-scope
// RUN: fxmlir-opt --pipeline parallel --threads 1 --split-input-file %s | FileCheck %s --check-prefix=ONE
// RUN: fxmlir-opt --pipeline default --threads 2 --split-input-file %s | FileCheck %s --check-prefix=OMP

// The parallel stage cuts the outermost parallel loop of each large top-level structured op into
// one chunk per thread (scf.forall); the loops stage turns the chunks into an OpenMP
// worksharing loop inside a parallel region, which the LLVM translation outlines.

// A 512x1024 elementwise op: rows split in two halves of 256.
// CHECK-LABEL: func.func @large_map(
// CHECK-SAME:      %[[ARG0:[a-zA-Z0-9_]+]]: memref<512x1024xf32>
// CHECK:       %[[R:.*]] = scf.forall (%[[T:.*]]) in (2) shared_outs(%[[OUT:.*]] = %{{.*}}) -> (tensor<512x1024xf32>)
// CHECK:         linalg.generic {{.*}} ins(%{{.*}} : tensor<256x1024xf32>) outs(%{{.*}} : tensor<256x1024xf32>)
// CHECK:           math.log
// CHECK:         scf.forall.in_parallel
// CHECK-NEXT:      tensor.parallel_insert_slice %{{.*}} into %[[OUT]][%{{.*}}, 0] [256, 1024] [1, 1]
// CHECK:       bufferization.materialize_in_destination %[[R]]
// CHECK-NOT:   fxmlir.parallel
// ONE-LABEL: func.func @large_map(
// ONE-NOT:   scf.forall
// OMP-LABEL: llvm.func @large_map(
// OMP:         omp.parallel
// OMP:           omp.wsloop
// OMP:             omp.loop_nest
// OMP:               llvm.intr.log
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @large_map(%arg0: memref<512x1024xf32>, %arg1: memref<512x1024xf32>) attributes {llvm.emit_c_interface} {
  %0 = bufferization.to_tensor %arg0 restrict : memref<512x1024xf32> to tensor<512x1024xf32>
  %1 = bufferization.to_tensor %arg1 restrict writable : memref<512x1024xf32> to tensor<512x1024xf32>
  %2 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%0 : tensor<512x1024xf32>) outs(%1 : tensor<512x1024xf32>) {
  ^bb0(%in: f32, %out: f32):
    %3 = math.log %in : f32
    linalg.yield %3 : f32
  } -> tensor<512x1024xf32>
  bufferization.materialize_in_destination %2 in writable %arg1 : (tensor<512x1024xf32>, memref<512x1024xf32>) -> ()
  return
}

// -----

// A column sum over the leading (reduction) loop: the parallel column loop is split instead,
// and the fill of the accumulator moves into the chunk loop, each thread filling its slice.
// CHECK-LABEL: func.func @column_sum(
// CHECK:       scf.forall (%{{.*}}) in (2) {{.*}} -> (tensor<4096xf32>)
// CHECK:         %[[FILL:.*]] = linalg.fill {{.*}} -> tensor<2048xf32>
// CHECK:         linalg.generic {{.*}} iterator_types = ["reduction", "parallel"]
// CHECK-SAME:      ins(%{{.*}} : tensor<64x2048xf32>) outs(%[[FILL]] : tensor<2048xf32>)
// CHECK-NOT:   scf.forall (
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
func.func @column_sum(%arg0: memref<64x4096xf32>, %arg1: memref<4096xf32>) attributes {llvm.emit_c_interface} {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = bufferization.to_tensor %arg0 restrict : memref<64x4096xf32> to tensor<64x4096xf32>
  %1 = bufferization.to_tensor %arg1 restrict writable : memref<4096xf32> to tensor<4096xf32>
  %2 = linalg.fill ins(%cst : f32) outs(%1 : tensor<4096xf32>) -> tensor<4096xf32>
  %3 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction", "parallel"]} ins(%0 : tensor<64x4096xf32>) outs(%2 : tensor<4096xf32>) {
  ^bb0(%in: f32, %out: f32):
    %4 = arith.addf %out, %in : f32
    linalg.yield %4 : f32
  } -> tensor<4096xf32>
  bufferization.materialize_in_destination %3 in writable %arg1 : (tensor<4096xf32>, memref<4096xf32>) -> ()
  return
}

// -----

// The same with an accumulator large enough to be split on its own: its fill still moves into
// the sum's chunk loop, and is not split first (the sum's script could not fuse a fill already
// cut into a loop of its own, and the stage failed: a depthwise convolution's accumulator).
// CHECK-LABEL: func.func @column_sum_large_fill(
// CHECK:       scf.forall (%{{.*}}) in (2) {{.*}} -> (tensor<65536xf32>)
// CHECK:         %[[FILL:.*]] = linalg.fill {{.*}} -> tensor<32768xf32>
// CHECK:         linalg.generic {{.*}} ins(%{{.*}} : tensor<4x32768xf32>) outs(%[[FILL]] : tensor<32768xf32>)
// CHECK-NOT:   scf.forall (
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
func.func @column_sum_large_fill(%arg0: memref<4x65536xf32>, %arg1: memref<65536xf32>) attributes {llvm.emit_c_interface} {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = bufferization.to_tensor %arg0 restrict : memref<4x65536xf32> to tensor<4x65536xf32>
  %1 = bufferization.to_tensor %arg1 restrict writable : memref<65536xf32> to tensor<65536xf32>
  %2 = linalg.fill ins(%cst : f32) outs(%1 : tensor<65536xf32>) -> tensor<65536xf32>
  %3 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["reduction", "parallel"]} ins(%0 : tensor<4x65536xf32>) outs(%2 : tensor<65536xf32>) {
  ^bb0(%in: f32, %out: f32):
    %4 = arith.addf %out, %in : f32
    linalg.yield %4 : f32
  } -> tensor<65536xf32>
  bufferization.materialize_in_destination %3 in writable %arg1 : (tensor<65536xf32>, memref<65536xf32>) -> ()
  return
}

// -----

// An op calling a math function stays on one thread below 32768 loop iterations.
// CHECK-LABEL: func.func @small_map(
// CHECK-NOT:   scf.forall (
// CHECK:       return
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @small_map(%arg0: memref<64x64xf32>, %arg1: memref<64x64xf32>) attributes {llvm.emit_c_interface} {
  %0 = bufferization.to_tensor %arg0 restrict : memref<64x64xf32> to tensor<64x64xf32>
  %1 = bufferization.to_tensor %arg1 restrict writable : memref<64x64xf32> to tensor<64x64xf32>
  %2 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%0 : tensor<64x64xf32>) outs(%1 : tensor<64x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %3 = math.exp %in : f32
    linalg.yield %3 : f32
  } -> tensor<64x64xf32>
  bufferization.materialize_in_destination %2 in writable %arg1 : (tensor<64x64xf32>, memref<64x64xf32>) -> ()
  return
}

// -----

// Plain arithmetic stays on one thread below 65536 loop iterations: at 32768 the split cost
// more than it saved.
// CHECK-LABEL: func.func @plain_map(
// CHECK-NOT:   scf.forall (
// CHECK:       return
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @plain_map(%arg0: memref<64x512xf32>, %arg1: memref<64x512xf32>) attributes {llvm.emit_c_interface} {
  %cst = arith.constant 2.000000e+00 : f32
  %0 = bufferization.to_tensor %arg0 restrict : memref<64x512xf32> to tensor<64x512xf32>
  %1 = bufferization.to_tensor %arg1 restrict writable : memref<64x512xf32> to tensor<64x512xf32>
  %2 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%0 : tensor<64x512xf32>) outs(%1 : tensor<64x512xf32>) {
  ^bb0(%in: f32, %out: f32):
    %3 = arith.mulf %in, %cst : f32
    linalg.yield %3 : f32
  } -> tensor<64x512xf32>
  bufferization.materialize_in_destination %2 in writable %arg1 : (tensor<64x512xf32>, memref<64x512xf32>) -> ()
  return
}

// -----

// A transposing copy (a weight's aten.t): split into two chunks of 128 result rows, each cut
// into 16x16 tiles read as sixteen rows, transposed by shuffles in registers and written as
// sixteen rows; no element-wise moves remain.
// CHECK-LABEL: func.func @transpose(
// CHECK:       scf.forall (%{{.*}}) in (2) {{.*}} -> (tensor<256x512xf32>)
// CHECK:         scf.for
// CHECK:           scf.for
// CHECK:             vector.transfer_read {{.*}} : tensor<16x16xf32>, vector<16x16xf32>
// CHECK-COUNT-64:    vector.shuffle {{.*}} : vector<16xf32>, vector<16xf32>
// CHECK:             vector.transfer_write {{.*}} : vector<16x16xf32>, tensor<16x16xf32>
// CHECK-NOT:   linalg.generic
// CHECK-NOT:   vector.transpose
// ONE-LABEL: func.func @transpose(
// ONE-NOT:     scf.forall
// ONE-COUNT-64: vector.shuffle
#map = affine_map<(d0, d1) -> (d1, d0)>
#map1 = affine_map<(d0, d1) -> (d0, d1)>
func.func @transpose(%arg0: memref<512x256xf32>, %arg1: memref<256x512xf32>) attributes {llvm.emit_c_interface} {
  %0 = bufferization.to_tensor %arg0 restrict : memref<512x256xf32> to tensor<512x256xf32>
  %1 = tensor.empty() : tensor<256x512xf32>
  %2 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel"]} ins(%0 : tensor<512x256xf32>) outs(%1 : tensor<256x512xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<256x512xf32>
  bufferization.materialize_in_destination %2 in writable %arg1 : (tensor<256x512xf32>, memref<256x512xf32>) -> ()
  return
}

// -----

// A batched transpose of the two inner dimensions (attention's kᵀ), too small to split: one
// unit batch tile and 16x16 tiles of the inner dimensions.
// CHECK-LABEL: func.func @batched_transpose(
// CHECK-NOT:   scf.forall
// CHECK:       vector.transfer_read {{.*}} : tensor<1x16x16xf32>, vector<16x16xf32>
// CHECK-COUNT-64: vector.shuffle
// CHECK:       vector.transfer_write {{.*}} : vector<16x16xf32>, tensor<1x16x16xf32>
#map = affine_map<(d0, d1, d2) -> (d0, d2, d1)>
#map1 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
func.func @batched_transpose(%arg0: memref<2x64x32xf32>, %arg1: memref<2x32x64xf32>) attributes {llvm.emit_c_interface} {
  %0 = bufferization.to_tensor %arg0 restrict : memref<2x64x32xf32> to tensor<2x64x32xf32>
  %1 = tensor.empty() : tensor<2x32x64xf32>
  %2 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel", "parallel"]} ins(%0 : tensor<2x64x32xf32>) outs(%1 : tensor<2x32x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<2x32x64xf32>
  bufferization.materialize_in_destination %2 in writable %arg1 : (tensor<2x32x64xf32>, memref<2x32x64xf32>) -> ()
  return
}

// -----

// A convolution weight's transposed copy for its input gradient (1 x co x ci x 1 x 1 to
// 1 x ci x co x 1 x 1): its innermost dimensions are units, and the transpose is of the two
// longer ones, tiled like a matrix's (too small to split between threads).
// CHECK-LABEL: func.func @unit_dims_transpose(
// CHECK-NOT:   scf.forall
// CHECK:         vector.transfer_read {{.*}} : tensor<1x16x16x1x1xf32>, vector<16x16x1x1xf32>
// CHECK-COUNT-64: vector.shuffle
// CHECK:         vector.transfer_write {{.*}} tensor<1x16x16x1x1xf32>
// CHECK-NOT:   linalg.generic
#map = affine_map<(d0, d1, d2, d3, d4) -> (d0, d2, d1, d3, d4)>
#map1 = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>
func.func @unit_dims_transpose(%arg0: memref<1x128x64x1x1xf32>, %arg1: memref<1x64x128x1x1xf32>) attributes {llvm.emit_c_interface} {
  %0 = bufferization.to_tensor %arg0 restrict : memref<1x128x64x1x1xf32> to tensor<1x128x64x1x1xf32>
  %1 = tensor.empty() : tensor<1x64x128x1x1xf32>
  %2 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%0 : tensor<1x128x64x1x1xf32>) outs(%1 : tensor<1x64x128x1x1xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<1x64x128x1x1xf32>
  bufferization.materialize_in_destination %2 in writable %arg1 : (tensor<1x64x128x1x1xf32>, memref<1x64x128x1x1xf32>) -> ()
  return
}

// -----

// A transpose whose inner dimension (24) takes no whole 16x16 tile keeps the plain loop nest.
// CHECK-LABEL: func.func @ragged_transpose(
// CHECK:       linalg.generic
// CHECK-NOT:   vector.shuffle
#map = affine_map<(d0, d1) -> (d1, d0)>
#map1 = affine_map<(d0, d1) -> (d0, d1)>
func.func @ragged_transpose(%arg0: memref<24x64xf32>, %arg1: memref<64x24xf32>) attributes {llvm.emit_c_interface} {
  %0 = bufferization.to_tensor %arg0 restrict : memref<24x64xf32> to tensor<24x64xf32>
  %1 = tensor.empty() : tensor<64x24xf32>
  %2 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel"]} ins(%0 : tensor<24x64xf32>) outs(%1 : tensor<64x24xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<64x24xf32>
  bufferization.materialize_in_destination %2 in writable %arg1 : (tensor<64x24xf32>, memref<64x24xf32>) -> ()
  return
}

// -----

// Short rows (a 3 x 3 convolution weight's taps): an elementwise op whose operands all use the
// identity map is flattened into one loop inside each chunk, so that the loop vectoriser sees
// 1179648 elements per thread rather than rows of 3.
// CHECK-LABEL: func.func @short_rows(
// CHECK:       scf.forall (%{{.*}}) in (2) {{.*}} -> (tensor<512x512x3x3xf32>)
// CHECK:         tensor.collapse_shape %{{.*}} {{\[\[}}0, 1, 2, 3]] : tensor<256x512x3x3xf32> into tensor<1179648xf32>
// CHECK:         linalg.generic {{.*}} iterator_types = ["parallel"]} ins(%{{.*}} : tensor<1179648xf32>) outs(%{{.*}} : tensor<1179648xf32>)
// CHECK:           arith.maximumf
// CHECK:         tensor.expand_shape %{{.*}} {{\[\[}}0, 1, 2, 3]] output_shape [256, 512, 3, 3]
// ONE-LABEL: func.func @short_rows(
// ONE-NOT:     scf.forall
// ONE:         linalg.generic {{.*}} ins(%{{.*}} : tensor<2359296xf32>) outs(%{{.*}} : tensor<2359296xf32>)
#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
func.func @short_rows(%arg0: memref<512x512x3x3xf32>, %arg1: memref<512x512x3x3xf32>) attributes {llvm.emit_c_interface} {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = bufferization.to_tensor %arg0 restrict : memref<512x512x3x3xf32> to tensor<512x512x3x3xf32>
  %1 = bufferization.to_tensor %arg1 restrict writable : memref<512x512x3x3xf32> to tensor<512x512x3x3xf32>
  %2 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%0 : tensor<512x512x3x3xf32>) outs(%1 : tensor<512x512x3x3xf32>) {
  ^bb0(%in: f32, %out: f32):
    %3 = arith.maximumf %in, %cst : f32
    linalg.yield %3 : f32
  } -> tensor<512x512x3x3xf32>
  bufferization.materialize_in_destination %2 in writable %arg1 : (tensor<512x512x3x3xf32>, memref<512x512x3x3xf32>) -> ()
  return
}

// -----

// A broadcast operand (a per-channel bias over 7 x 7 maps) keeps the loop nest as it is.
// CHECK-LABEL: func.func @broadcast_rows(
// CHECK-NOT:     tensor.collapse_shape
// CHECK:         linalg.generic {{.*}} ins(%{{.*}}, %{{.*}} : tensor<1x64x7x7xf32>, tensor<64xf32>) outs(%{{.*}} : tensor<1x64x7x7xf32>)
#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#bias = affine_map<(d0, d1, d2, d3) -> (d1)>
func.func @broadcast_rows(%arg0: memref<1x64x7x7xf32>, %arg1: memref<64xf32>, %arg2: memref<1x64x7x7xf32>) attributes {llvm.emit_c_interface} {
  %0 = bufferization.to_tensor %arg0 restrict : memref<1x64x7x7xf32> to tensor<1x64x7x7xf32>
  %1 = bufferization.to_tensor %arg1 restrict : memref<64xf32> to tensor<64xf32>
  %2 = bufferization.to_tensor %arg2 restrict writable : memref<1x64x7x7xf32> to tensor<1x64x7x7xf32>
  %3 = linalg.generic {indexing_maps = [#map, #bias, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%0, %1 : tensor<1x64x7x7xf32>, tensor<64xf32>) outs(%2 : tensor<1x64x7x7xf32>) {
  ^bb0(%in: f32, %b: f32, %out: f32):
    %4 = arith.addf %in, %b : f32
    linalg.yield %4 : f32
  } -> tensor<1x64x7x7xf32>
  bufferization.materialize_in_destination %3 in writable %arg2 : (tensor<1x64x7x7xf32>, memref<1x64x7x7xf32>) -> ()
  return
}

// -----

// A product over an empty reduction (symbolic batch and rows, no columns of the left operand)
// has no work to split: it stays whole, and the stage does not crash tiling it.
// CHECK-LABEL: func.func @empty_reduction(
// CHECK-NOT:     scf.forall
// CHECK:         linalg.batch_matmul
// ONE-LABEL:   func.func @empty_reduction(
func.func @empty_reduction(%a: tensor<?x?x0xf32>, %b: tensor<?x0x?xf32>, %c: tensor<?x?x?xf32>) -> tensor<?x?x?xf32> {
  %r = linalg.batch_matmul ins(%a, %b : tensor<?x?x0xf32>, tensor<?x0x?xf32>) outs(%c : tensor<?x?x?xf32>) -> tensor<?x?x?xf32>
  return %r : tensor<?x?x?xf32>
}
