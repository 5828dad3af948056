// RUN: fxmlir-opt --pipeline bufferize --split-input-file %s | FileCheck %s --enable-var-scope

// The bufferize stage (one-shot-bufferize over function boundaries, buffer deallocation) on the
// output of fusion: no tensors remain; each result is computed into one 64-byte-aligned buffer
// and copied into the caller's output memref (not computed in place: see BUFFERIZE in
// src/pipeline/mod.rs for why eliminate-empty-tensors is not used); buffers are freed.

// A fused elementwise function reads the input memrefs and computes into one buffer.
// CHECK-DAG: #[[$ID:.*]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-DAG: #[[$ROW:.*]] = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func @chain(
// CHECK-SAME:      %[[ARG0:[a-zA-Z0-9_]+]]: memref<4x8xf32>
// CHECK-SAME:      %[[ARG1:[a-zA-Z0-9_]+]]: memref<8xf32>
// CHECK-SAME:      %[[ARG2:[a-zA-Z0-9_]+]]: memref<4x8xf32>
// CHECK-NOT:   tensor
// CHECK:       %[[BUF:.*]] = memref.alloc() {alignment = 64 : i64} : memref<4x8xf32>
// CHECK:       linalg.generic {indexing_maps = [#[[$ID]], #[[$ROW]], #[[$ID]]], iterator_types = ["parallel", "parallel"]}
// CHECK-SAME:      ins(%[[ARG0]], %[[ARG1]] : memref<4x8xf32>, memref<8xf32>) outs(%[[BUF]] : memref<4x8xf32>)
// CHECK:         arith.mulf
// CHECK:       memref.copy %[[BUF]], %[[ARG2]] : memref<4x8xf32> to memref<4x8xf32>
// CHECK:       memref.dealloc %[[BUF]]
// CHECK-NOT:   tensor
// CHECK:       return
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
func.func @chain(%arg0: memref<4x8xf32>, %arg1: memref<8xf32>, %arg2: memref<4x8xf32>) attributes {llvm.emit_c_interface} {
  %cst = arith.constant 2.000000e+00 : f32
  %cst_0 = arith.constant 0.000000e+00 : f32
  %0 = bufferization.to_tensor %arg0 restrict : memref<4x8xf32> to tensor<4x8xf32>
  %1 = bufferization.to_tensor %arg1 restrict : memref<8xf32> to tensor<8xf32>
  %2 = tensor.empty() : tensor<4x8xf32>
  %3 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%0, %1 : tensor<4x8xf32>, tensor<8xf32>) outs(%2 : tensor<4x8xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %4 = arith.addf %in, %in_1 : f32
    %5 = arith.maximumf %4, %cst_0 : f32
    %6 = arith.mulf %5, %cst : f32
    linalg.yield %6 : f32
  } -> tensor<4x8xf32>
  bufferization.materialize_in_destination %3 in restrict writable %arg2 : (tensor<4x8xf32>, memref<4x8xf32>) -> ()
  return
}

// -----

// A reduction fills its buffer, accumulates into it, and the result is copied out.
// CHECK-LABEL: func.func @sum_of_exp(
// CHECK-SAME:      %[[ARG0:[a-zA-Z0-9_]+]]: memref<4x8xf32>
// CHECK-SAME:      %[[ARG1:[a-zA-Z0-9_]+]]: memref<4xf32>
// CHECK:       %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK:       %[[BUF:.*]] = memref.alloc() {alignment = 64 : i64} : memref<4xf32>
// CHECK:       linalg.fill ins(%[[ZERO]] : f32) outs(%[[BUF]] : memref<4xf32>)
// CHECK:       linalg.generic {{.*}} ins(%[[ARG0]] : memref<4x8xf32>) outs(%[[BUF]] : memref<4xf32>)
// CHECK:       memref.copy %[[BUF]], %[[ARG1]] : memref<4xf32> to memref<4xf32>
// CHECK-NOT:   tensor
// CHECK:       return
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
func.func @sum_of_exp(%arg0: memref<4x8xf32>, %arg1: memref<4xf32>) attributes {llvm.emit_c_interface} {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = bufferization.to_tensor %arg0 restrict : memref<4x8xf32> to tensor<4x8xf32>
  %1 = tensor.empty() : tensor<4xf32>
  %2 = linalg.fill ins(%cst : f32) outs(%1 : tensor<4xf32>) -> tensor<4xf32>
  %3 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%0 : tensor<4x8xf32>) outs(%2 : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %4 = math.exp %in : f32
    %5 = arith.addf %out, %4 : f32
    linalg.yield %5 : f32
  } -> tensor<4xf32>
  bufferization.materialize_in_destination %3 in restrict writable %arg1 : (tensor<4xf32>, memref<4xf32>) -> ()
  return
}

// -----

// The matmul result gets one 64-byte-aligned buffer, the epilogue updates it in place, and it is
// copied into the output and freed.
// CHECK-LABEL: func.func @linear_relu(
// CHECK-SAME:      %[[ARG0:[a-zA-Z0-9_]+]]: memref<4x8xf32>
// CHECK-SAME:      %[[ARG1:[a-zA-Z0-9_]+]]: memref<8x16xf32>
// CHECK-SAME:      %[[ARG2:[a-zA-Z0-9_]+]]: memref<16xf32>
// CHECK-SAME:      %[[ARG3:[a-zA-Z0-9_]+]]: memref<4x16xf32>
// CHECK:       %[[BUF:.*]] = memref.alloc() {alignment = 64 : i64} : memref<4x16xf32>
// CHECK:       linalg.fill ins(%{{.*}} : f32) outs(%[[BUF]] : memref<4x16xf32>)
// CHECK:       linalg.matmul ins(%[[ARG0]], %[[ARG1]] : memref<4x8xf32>, memref<8x16xf32>) outs(%[[BUF]] : memref<4x16xf32>)
// CHECK:       linalg.generic {{.*}} ins(%[[BUF]], %[[ARG2]] : memref<4x16xf32>, memref<16xf32>) outs(%[[BUF]] : memref<4x16xf32>)
// CHECK:       memref.copy %[[BUF]], %[[ARG3]] : memref<4x16xf32> to memref<4x16xf32>
// CHECK:       memref.dealloc %[[BUF]] : memref<4x16xf32>
// CHECK-NOT:   memref.alloc
// CHECK:       return
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
func.func @linear_relu(%arg0: memref<4x8xf32>, %arg1: memref<8x16xf32>, %arg2: memref<16xf32>, %arg3: memref<4x16xf32>) attributes {llvm.emit_c_interface} {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = bufferization.to_tensor %arg0 restrict : memref<4x8xf32> to tensor<4x8xf32>
  %1 = bufferization.to_tensor %arg1 restrict : memref<8x16xf32> to tensor<8x16xf32>
  %2 = bufferization.to_tensor %arg2 restrict : memref<16xf32> to tensor<16xf32>
  %3 = tensor.empty() : tensor<4x16xf32>
  %4 = linalg.fill ins(%cst : f32) outs(%3 : tensor<4x16xf32>) -> tensor<4x16xf32>
  %5 = linalg.matmul ins(%0, %1 : tensor<4x8xf32>, tensor<8x16xf32>) outs(%4 : tensor<4x16xf32>) -> tensor<4x16xf32>
  %6 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%5, %2 : tensor<4x16xf32>, tensor<16xf32>) outs(%3 : tensor<4x16xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %7 = arith.addf %in, %in_0 : f32
    %8 = arith.maximumf %7, %cst : f32
    linalg.yield %8 : f32
  } -> tensor<4x16xf32>
  bufferization.materialize_in_destination %6 in restrict writable %arg3 : (tensor<4x16xf32>, memref<4x16xf32>) -> ()
  return
}

// -----

// A strided input is read through its strided memref; a slice becomes a memref.subview copied
// into its output; a strided output receives its result through its layout.
// CHECK-LABEL: func.func @strided(
// CHECK-SAME:      %[[ARG0:[a-zA-Z0-9_]+]]: memref<4x8xf32, strided<[1, 4]>>
// CHECK-SAME:      %[[ARG1:[a-zA-Z0-9_]+]]: memref<4x4xf32>
// CHECK-SAME:      %[[ARG2:[a-zA-Z0-9_]+]]: memref<4x8xf32, strided<[1, 4]>>
// CHECK:       %[[OUTBUF:.*]] = memref.alloc() {{.*}} : memref<4x8xf32>
// CHECK:       %[[BUF:.*]] = memref.alloc() {{.*}} : memref<4x8xf32>
// CHECK:       linalg.generic {{.*}} ins(%[[ARG0]] : memref<4x8xf32, strided<[1, 4]>>) outs(%[[BUF]] : memref<4x8xf32>)
// CHECK:       %[[SV:.*]] = memref.subview %[[BUF]][0, 0] [4, 4] [1, 1] : memref<4x8xf32> to memref<4x4xf32, strided<[8, 1]>>
// CHECK:       linalg.generic {{.*}} ins(%[[BUF]] : memref<4x8xf32>) outs(%[[OUTBUF]] : memref<4x8xf32>)
// CHECK:       memref.copy %[[SV]], %[[ARG1]] : memref<4x4xf32, strided<[8, 1]>> to memref<4x4xf32>
// CHECK:       memref.copy %[[OUTBUF]], %[[ARG2]] : memref<4x8xf32> to memref<4x8xf32, strided<[1, 4]>>
// CHECK-NOT:   tensor
// CHECK:       return
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @strided(%arg0: memref<4x8xf32, strided<[1, 4]>>, %arg1: memref<4x4xf32>, %arg2: memref<4x8xf32, strided<[1, 4]>>) attributes {llvm.emit_c_interface} {
  %0 = bufferization.to_tensor %arg0 restrict : memref<4x8xf32, strided<[1, 4]>> to tensor<4x8xf32>
  %1 = tensor.empty() : tensor<4x8xf32>
  %2 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%0 : tensor<4x8xf32>) outs(%1 : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %4 = math.exp %in : f32
    linalg.yield %4 : f32
  } -> tensor<4x8xf32>
  %extracted_slice = tensor.extract_slice %2[0, 0] [4, 4] [1, 1] : tensor<4x8xf32> to tensor<4x4xf32>
  %3 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%2 : tensor<4x8xf32>) outs(%1 : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %4 = arith.negf %in : f32
    linalg.yield %4 : f32
  } -> tensor<4x8xf32>
  bufferization.materialize_in_destination %extracted_slice in restrict writable %arg1 : (tensor<4x4xf32>, memref<4x4xf32>) -> ()
  bufferization.materialize_in_destination %3 in restrict writable %arg2 : (tensor<4x8xf32>, memref<4x8xf32, strided<[1, 4]>>) -> ()
  return
}

// -----

// An expansion that splits one size into several dynamic ones (a product's rows back into
// batch and sequence), which MLIR's memref lowering cannot take, becomes the view it is: the
// source's base buffer reinterpreted with the expansion's sizes, strides running outwards from
// the source row's stride within the split group.
// CHECK-LABEL: func.func @split_rows(
// CHECK-SAME:      %[[SRC:[a-zA-Z0-9_]+]]: memref<?x8xf32>{{.*}}, %[[B:[a-zA-Z0-9_]+]]: index{{.*}}, %[[S:[a-zA-Z0-9_]+]]: index
// CHECK-NOT:     expand_shape
// CHECK-NOT:     arith.constant
// CHECK:         %[[BASE:.*]], %[[OFFSET:.*]], %{{.*}}:2, %[[STRIDES:.*]]:2 = memref.extract_strided_metadata %[[SRC]]
// CHECK:         %[[SEQ_STRIDE:.*]] = arith.muli %[[STRIDES]]#0, %[[S]] : index
// CHECK:         memref.reinterpret_cast %[[BASE]] to offset: [0], sizes: [%[[B]], %[[S]], 8], strides: [%[[SEQ_STRIDE]], 8, 1] : memref<f32> to memref<?x?x8xf32>
func.func @split_rows(%arg0: memref<?x8xf32>, %b: index, %s: index, %out: memref<?x?x8xf32>) attributes {llvm.emit_c_interface} {
  %0 = bufferization.to_tensor %arg0 restrict : memref<?x8xf32> to tensor<?x8xf32>
  %1 = tensor.expand_shape %0 [[0, 1], [2]] output_shape [%b, %s, 8] : tensor<?x8xf32> into tensor<?x?x8xf32>
  bufferization.materialize_in_destination %1 in restrict writable %out : (tensor<?x?x8xf32>, memref<?x?x8xf32>) -> ()
  return
}

// -----

// A tensor computed into the unpadded part of a padded buffer (a convolution's input canvas)
// and read again after its placement (a residual add): the read is pointed at the padded
// tensor (src/pipeline/materialized.rs), so the tensor is computed in the canvas in place and
// nothing is copied but the outputs.
// CHECK-LABEL: func.func @placed(
// CHECK-SAME:      %[[ARG0:[a-zA-Z0-9_]+]]: memref<2x12xf32>
// CHECK-SAME:      %[[ARG1:[a-zA-Z0-9_]+]]: memref<2x16xf32>
// CHECK-SAME:      %[[ARG2:[a-zA-Z0-9_]+]]: memref<2x12xf32>
// CHECK:       %[[CANVAS:.*]] = memref.alloc() {alignment = 64 : i64} : memref<2x16xf32>
// CHECK:       %[[PAD:.*]] = memref.subview %[[CANVAS]][0, 12] [2, 4] [1, 1]
// CHECK:       linalg.fill {{.*}} outs(%[[PAD]] :
// CHECK:       %[[PART:.*]] = memref.subview %[[CANVAS]][0, 0] [2, 12] [1, 1]
// CHECK-NOT:   memref.copy
// CHECK:       linalg.generic {{.*}} ins(%[[ARG0]] : memref<2x12xf32>) outs(%[[PART]] :
// CHECK:       arith.maximumf
// CHECK:       memref.copy %[[CANVAS]], %[[ARG1]]
// CHECK:       %[[SUM:.*]] = memref.alloc() {alignment = 64 : i64} : memref<2x12xf32>
// CHECK-NOT:   memref.copy
// CHECK:       linalg.generic {{.*}} ins(%[[PART]], %[[ARG0]] : {{.*}}) outs(%[[SUM]] :
// CHECK:       memref.copy %[[SUM]], %[[ARG2]]
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @placed(%arg0: memref<2x12xf32>, %arg1: memref<2x16xf32>, %arg2: memref<2x12xf32>) attributes {llvm.emit_c_interface} {
  %zero = arith.constant 0.000000e+00 : f32
  %x = bufferization.to_tensor %arg0 restrict : memref<2x12xf32> to tensor<2x12xf32>
  %d = bufferization.alloc_tensor() : tensor<2x16xf32>
  %pad = tensor.extract_slice %d[0, 12] [2, 4] [1, 1] : tensor<2x16xf32> to tensor<2x4xf32>
  %zeroed = linalg.fill ins(%zero : f32) outs(%pad : tensor<2x4xf32>) -> tensor<2x4xf32>
  %d1 = tensor.insert_slice %zeroed into %d[0, 12] [2, 4] [1, 1] : tensor<2x4xf32> into tensor<2x16xf32>
  %part = tensor.extract_slice %d1[0, 0] [2, 12] [1, 1] : tensor<2x16xf32> to tensor<2x12xf32>
  %t = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<2x12xf32>) outs(%part : tensor<2x12xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = arith.maximumf %in, %zero : f32
    linalg.yield %r : f32
  } -> tensor<2x12xf32>
  %m = bufferization.materialize_in_destination %t in %part : (tensor<2x12xf32>, tensor<2x12xf32>) -> tensor<2x12xf32>
  %p = tensor.insert_slice %m into %d1[0, 0] [2, 12] [1, 1] : tensor<2x12xf32> into tensor<2x16xf32>
  bufferization.materialize_in_destination %p in restrict writable %arg1 : (tensor<2x16xf32>, memref<2x16xf32>) -> ()
  %e = tensor.empty() : tensor<2x12xf32>
  %sum = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%t, %x : tensor<2x12xf32>, tensor<2x12xf32>) outs(%e : tensor<2x12xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %s = arith.addf %in, %in_0 : f32
    linalg.yield %s : f32
  } -> tensor<2x12xf32>
  bufferization.materialize_in_destination %sum in restrict writable %arg2 : (tensor<2x12xf32>, memref<2x12xf32>) -> ()
  return
}
