// RUN: fxmlir-opt --target=skylake-avx512 --pipeline schedule --split-input-file %s \
// RUN:   | FileCheck %s --enable-var-scope --implicit-check-not=transform. --implicit-check-not=fxmlir.
// RUN: fxmlir-opt --target=znver3 --pipeline schedule --split-input-file %s \
// RUN:   | FileCheck %s --check-prefix=AVX2

// The schedule stage on linalg on tensors as the fusion stage leaves it: Rust picks tile sizes
// from the static shapes (dividing every dimension) for the target's vector unit and level-2
// cache, appends a transform script, `transform-interpreter` tiles and vectorises each f32/f64
// matmul and batch_matmul, and the script and its tags are erased afterwards (no `transform.`
// or `fxmlir.` remains). CHECK lines are for Skylake-SP (32 zmm registers, 1 MiB of L2), AVX2
// lines for Zen 3 (16 ymm registers, 512 KiB of L2).

// A product with a bias+ReLU consumer: 8x32 register tiles (16 zmm accumulators) carried by
// the reduction loop in vector registers, 4 steps of k per iteration; the epilogue is tiled
// with the product, so the product never reaches memory; the fill folds into the zero init.
// The right operand (512 KiB, half of L2) is not blocked, but 256 rows read it 32 times: it
// is first copied into 8 contiguous panels of 512 x 32 (one per column tile), 8 rows at a time.
// CHECK-LABEL: func.func @addmm_relu(
// CHECK-DAG:     %[[ZERO:.*]] = arith.constant dense<0.000000e+00> : vector<8x32xf32>
// CHECK-DAG:     %[[C4:.*]] = arith.constant 4 : index
// CHECK-DAG:     %[[C8:.*]] = arith.constant 8 : index
// CHECK-DAG:     %[[C32:.*]] = arith.constant 32 : index
// CHECK-NOT:     linalg.
// CHECK:         %[[PANELS:.*]] = scf.for %{{.*}} = %{{.*}} to %{{.*}} step %[[C32]] iter_args(%{{.*}} = %{{.*}}) -> (tensor<8x512x32xf32>)
// CHECK:           scf.for %{{.*}} = %{{.*}} to %{{.*}} step %[[C8]] iter_args(%{{.*}} = %{{.*}}) -> (tensor<512x32xf32>)
// CHECK:             tensor.extract_slice {{.*}} : tensor<512x32xf32> to tensor<8x32xf32>
// CHECK:         scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %[[C8]] iter_args
// CHECK:           scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step %[[C32]] iter_args(%[[OUT:.*]] = %{{.*}})
// CHECK:             %[[PANEL:.*]] = affine.apply #{{.*}}(%[[J]])
// CHECK:             %[[ACC:.*]] = scf.for %[[K:.*]] = %{{.*}} to %{{.*}} step %[[C4]] iter_args(%[[A:.*]] = %[[ZERO]]) -> (vector<8x32xf32>)
// CHECK:               %[[L:.*]] = vector.transfer_read %{{.*}}[%[[I]], %[[K]]]{{.*}} : tensor<256x512xf32>, vector<8x4xf32>
// CHECK:               %[[R:.*]] = vector.transfer_read %[[PANELS]][%[[PANEL]], %[[K]], %{{.*}}]{{.*}} : tensor<8x512x32xf32>, vector<4x32xf32>
// CHECK:               %[[P:.*]] = vector.contract {{.*}} %[[L]], %[[R]], %[[A]] : vector<8x4xf32>, vector<4x32xf32> into vector<8x32xf32>
// CHECK:               scf.yield %[[P]] : vector<8x32xf32>
// CHECK:             %[[BIAS:.*]] = vector.transfer_read {{.*}} : tensor<256xf32>, vector<8x32xf32>
// CHECK:             %[[SUM:.*]] = arith.addf %[[ACC]], %[[BIAS]] : vector<8x32xf32>
// CHECK:             %[[RELU:.*]] = arith.maximumf %[[SUM]], %{{.*}} : vector<8x32xf32>
// CHECK:             vector.transfer_write %[[RELU]], %[[OUT]][%[[I]], %[[J]]] {{.*}} : vector<8x32xf32>, tensor<256x256xf32>
// CHECK-NOT:     linalg.
// CHECK:         bufferization.materialize_in_destination
// With half of Zen 3's L2 (256 KiB) the same right operand is blocked, packed into panels of
// 256 x 16, and register tiles are 4x16 (8 ymm accumulators).
// AVX2-LABEL: func.func @addmm_relu(
// AVX2:         scf.for {{.*}} -> (tensor<16x256x16xf32>)
// AVX2:         vector.contract {{.*}} : vector<4x4xf32>, vector<4x16xf32> into vector<4x16xf32>
func.func @addmm_relu(%arg0: memref<256x512xf32>, %arg1: memref<512x256xf32>, %arg2: memref<256xf32>, %arg3: memref<256x256xf32>) attributes {llvm.emit_c_interface} {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = bufferization.to_tensor %arg0 restrict : memref<256x512xf32> to tensor<256x512xf32>
  %1 = bufferization.to_tensor %arg1 restrict : memref<512x256xf32> to tensor<512x256xf32>
  %2 = bufferization.to_tensor %arg2 restrict : memref<256xf32> to tensor<256xf32>
  %3 = tensor.empty() : tensor<256x256xf32>
  %4 = linalg.fill ins(%cst : f32) outs(%3 : tensor<256x256xf32>) -> tensor<256x256xf32>
  %5 = linalg.matmul ins(%0, %1 : tensor<256x512xf32>, tensor<512x256xf32>) outs(%4 : tensor<256x256xf32>) -> tensor<256x256xf32>
  %6 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%5, %2 : tensor<256x256xf32>, tensor<256xf32>) outs(%3 : tensor<256x256xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %7 = arith.addf %in, %in_0 : f32
    %8 = arith.maximumf %7, %cst : f32
    linalg.yield %8 : f32
  } -> tensor<256x256xf32>
  bufferization.materialize_in_destination %6 in restrict writable %arg3 : (tensor<256x256xf32>, memref<256x256xf32>) -> ()
  return
}

// -----

// The same product over 197 rows (prime): 24 register tiles of 8 rows, then the rows loop is
// peeled and its last 5 rows tiled a row at a time, each row with its epilogue and its zero
// init: no fill of the whole output remains and the product never reaches memory (cut off as
// a product of its own, the rest would keep a whole fill and an epilogue pass of its own).
// CHECK-LABEL: func.func @addmm_relu_rest(
// CHECK-DAG:     %[[C192:.*]] = arith.constant 192 : index
// CHECK-DAG:     %[[C5:.*]] = arith.constant 5 : index
// CHECK-NOT:     linalg.
// CHECK:         scf.for %{{.*}} = %{{.*}} to %[[C192]] step %c8
// CHECK:           scf.for
// CHECK:             scf.for {{.*}} -> (vector<8x32xf32>)
// CHECK:               vector.contract {{.*}} into vector<8x32xf32>
// CHECK:             arith.maximumf {{.*}} : vector<8x32xf32>
// CHECK:         scf.for
// CHECK:           scf.for %{{.*}} = %{{.*}} to %[[C5]] step %c1
// CHECK:             scf.for {{.*}} -> (vector<32xf32>)
// CHECK:               vector.contract {{.*}} into vector<32xf32>
// CHECK:             arith.maximumf {{.*}} : vector<32xf32>
func.func @addmm_relu_rest(%arg0: memref<197x512xf32>, %arg1: memref<512x256xf32>, %arg2: memref<256xf32>, %arg3: memref<197x256xf32>) attributes {llvm.emit_c_interface} {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = bufferization.to_tensor %arg0 restrict : memref<197x512xf32> to tensor<197x512xf32>
  %1 = bufferization.to_tensor %arg1 restrict : memref<512x256xf32> to tensor<512x256xf32>
  %2 = bufferization.to_tensor %arg2 restrict : memref<256xf32> to tensor<256xf32>
  %3 = tensor.empty() : tensor<197x256xf32>
  %4 = linalg.fill ins(%cst : f32) outs(%3 : tensor<197x256xf32>) -> tensor<197x256xf32>
  %5 = linalg.matmul ins(%0, %1 : tensor<197x512xf32>, tensor<512x256xf32>) outs(%4 : tensor<197x256xf32>) -> tensor<197x256xf32>
  %6 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%5, %2 : tensor<197x256xf32>, tensor<256xf32>) outs(%3 : tensor<197x256xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %7 = arith.addf %in, %in_0 : f32
    %8 = arith.maximumf %7, %cst : f32
    linalg.yield %8 : f32
  } -> tensor<197x256xf32>
  bufferization.materialize_in_destination %6 in restrict writable %arg3 : (tensor<197x256xf32>, memref<197x256xf32>) -> ()
  return
}

// -----

// 1024^3: the right operand (4 MiB) exceeds L2, so it is walked in blocks of 256 rows (the
// depth that fits) by 512 columns (512 KiB, half of L2) outside the register tiles. Each block
// is packed into 16 panels of 256 x 32 before its tiles read it; the accumulator is loaded from
// and stored to the output per block, which the whole-tensor fill zeroes first.
// CHECK-LABEL: func.func @mm_blocked(
// CHECK-DAG:     %[[C512:.*]] = arith.constant 512 : index
// CHECK-DAG:     %[[C256:.*]] = arith.constant 256 : index
// CHECK-DAG:     %[[C8:.*]] = arith.constant 8 : index
// CHECK-DAG:     %[[C32:.*]] = arith.constant 32 : index
// CHECK:         %[[FILL:.*]] = linalg.fill
// CHECK:         scf.for %[[NB:.*]] = %{{.*}} to %{{.*}} step %[[C512]] iter_args(%{{.*}} = %[[FILL]])
// CHECK:           scf.for %[[KB:.*]] = %{{.*}} to %{{.*}} step %[[C256]]
// CHECK:             %[[PANELS:.*]] = scf.for {{.*}} step %[[C32]] {{.*}} -> (tensor<16x256x32xf32>)
// CHECK:               vector.transfer_read {{.*}} : tensor<1024x1024xf32>, vector<8x32xf32>
// CHECK:               vector.transfer_write {{.*}} : vector<8x32xf32>, tensor<256x32xf32>
// CHECK:             scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %[[C8]]
// CHECK:               scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step %[[C32]]
// CHECK:                 %[[INIT:.*]] = vector.transfer_read %{{.*}}[%[[I]], %[[J]]]{{.*}} : tensor<1024x512xf32>, vector<8x32xf32>
// CHECK:                 %[[ACC:.*]] = scf.for {{.*}} iter_args(%{{.*}} = %[[INIT]]) -> (vector<8x32xf32>)
// CHECK:                   vector.transfer_read %[[PANELS]]{{.*}} : tensor<16x256x32xf32>, vector<4x32xf32>
// CHECK:                   vector.contract {{.*}} : vector<8x4xf32>, vector<4x32xf32> into vector<8x32xf32>
// CHECK:                 vector.transfer_write %[[ACC]], %{{.*}}[%[[I]], %[[J]]]
// CHECK-NOT:     linalg.matmul
func.func @mm_blocked(%arg0: memref<1024x1024xf32>, %arg1: memref<1024x1024xf32>, %arg2: memref<1024x1024xf32>) attributes {llvm.emit_c_interface} {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = bufferization.to_tensor %arg0 restrict : memref<1024x1024xf32> to tensor<1024x1024xf32>
  %1 = bufferization.to_tensor %arg1 restrict : memref<1024x1024xf32> to tensor<1024x1024xf32>
  %2 = tensor.empty() : tensor<1024x1024xf32>
  %3 = linalg.fill ins(%cst : f32) outs(%2 : tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  %4 = linalg.matmul ins(%0, %1 : tensor<1024x1024xf32>, tensor<1024x1024xf32>) outs(%3 : tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  bufferization.materialize_in_destination %4 in restrict writable %arg2 : (tensor<1024x1024xf32>, memref<1024x1024xf32>) -> ()
  return
}

// -----

// 101 rows (prime) of a blocked product: 12 full register tiles and a rest of 5 rows, which
// stays in the rows loop. That loop is peeled after the block is packed, so the rest's
// one-row tiles read the same panels as the full tiles (cut off as a product of its own, the
// rest read the right operand where it lies, a row stride apart).
// CHECK-LABEL: func.func @mm_blocked_rest(
// CHECK-DAG:     %[[C96:.*]] = arith.constant 96 : index
// CHECK-DAG:     %[[C5:.*]] = arith.constant 5 : index
// CHECK:         scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c256
// CHECK:           %[[PANELS:.*]] = scf.for {{.*}} -> (tensor<?x256x32xf32>)
// CHECK:           scf.for %{{.*}} = %{{.*}} to %[[C96]] step %c8
// CHECK:             scf.for
// CHECK:               scf.for {{.*}} -> (vector<8x32xf32>)
// CHECK:                 vector.transfer_read %[[PANELS]]{{.*}} : tensor<?x256x32xf32>, vector<4x32xf32>
// CHECK:                 vector.contract {{.*}} : vector<8x4xf32>, vector<4x32xf32> into vector<8x32xf32>
// CHECK:           scf.for
// CHECK:             scf.for %{{.*}} = %{{.*}} to %[[C5]] step %c1
// CHECK:               scf.for {{.*}} -> (vector<32xf32>)
// CHECK:                 vector.transfer_read %[[PANELS]]{{.*}} : tensor<?x256x32xf32>, vector<4x32xf32>
// CHECK:                 vector.contract {{.*}} : vector<4xf32>, vector<4x32xf32> into vector<32xf32>
// CHECK-NOT:     linalg.matmul
func.func @mm_blocked_rest(%arg0: memref<101x1024xf32>, %arg1: memref<1024x512xf32>, %arg2: memref<101x512xf32>) attributes {llvm.emit_c_interface} {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = bufferization.to_tensor %arg0 restrict : memref<101x1024xf32> to tensor<101x1024xf32>
  %1 = bufferization.to_tensor %arg1 restrict : memref<1024x512xf32> to tensor<1024x512xf32>
  %2 = tensor.empty() : tensor<101x512xf32>
  %3 = linalg.fill ins(%cst : f32) outs(%2 : tensor<101x512xf32>) -> tensor<101x512xf32>
  %4 = linalg.matmul ins(%0, %1 : tensor<101x1024xf32>, tensor<1024x512xf32>) outs(%3 : tensor<101x512xf32>) -> tensor<101x512xf32>
  bufferization.materialize_in_destination %4 in restrict writable %arg2 : (tensor<101x512xf32>, memref<101x512xf32>) -> ()
  return
}

// -----

// 64 rows: the left block (64 x 256, 64 KiB) stays in cache while columns vary, so column
// tiles go outermost inside the blocks (256 deep, 512 wide, packed like @mm_blocked's).
// CHECK-LABEL: func.func @mm_wide(
// CHECK-DAG:     %[[C512:.*]] = arith.constant 512 : index
// CHECK-DAG:     %[[C256:.*]] = arith.constant 256 : index
// CHECK-DAG:     %[[C8:.*]] = arith.constant 8 : index
// CHECK-DAG:     %[[C32:.*]] = arith.constant 32 : index
// CHECK:         scf.for %{{.*}} = %{{.*}} to %{{.*}} step %[[C512]]
// CHECK:           scf.for %{{.*}} = %{{.*}} to %{{.*}} step %[[C256]]
// CHECK:             scf.for {{.*}} -> (tensor<16x256x32xf32>)
// CHECK:             scf.for %{{.*}} = %{{.*}} to %{{.*}} step %[[C32]]
// CHECK:               scf.for %{{.*}} = %{{.*}} to %{{.*}} step %[[C8]]
// CHECK:                 vector.contract {{.*}} : vector<8x4xf32>, vector<4x32xf32> into vector<8x32xf32>
// CHECK-NOT:     linalg.matmul
func.func @mm_wide(%arg0: memref<64x4096xf32>, %arg1: memref<4096x1024xf32>, %arg2: memref<64x1024xf32>) attributes {llvm.emit_c_interface} {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = bufferization.to_tensor %arg0 restrict : memref<64x4096xf32> to tensor<64x4096xf32>
  %1 = bufferization.to_tensor %arg1 restrict : memref<4096x1024xf32> to tensor<4096x1024xf32>
  %2 = tensor.empty() : tensor<64x1024xf32>
  %3 = linalg.fill ins(%cst : f32) outs(%2 : tensor<64x1024xf32>) -> tensor<64x1024xf32>
  %4 = linalg.matmul ins(%0, %1 : tensor<64x4096xf32>, tensor<4096x1024xf32>) outs(%3 : tensor<64x1024xf32>) -> tensor<64x1024xf32>
  bufferization.materialize_in_destination %4 in restrict writable %arg2 : (tensor<64x1024xf32>, memref<64x1024xf32>) -> ()
  return
}

// -----

// A reduction of one block (27 deep) over a right operand beyond L2 (a stem convolution's
// patch matrix): column blocks of 4,832 (half of L2), then the rest of 2,688 as one block,
// each packed into panels; the fill goes into the blocks and the register tiles, which start
// from zeros (no fill of the whole product, written and read back).
// CHECK-LABEL: func.func @mm_one_block(
// CHECK-DAG:     %[[Z:.*]] = arith.constant dense<0.000000e+00> : vector<8x32xf32>
// CHECK-DAG:     %[[C4832:.*]] = arith.constant 4832 : index
// CHECK-DAG:     %[[C9664:.*]] = arith.constant 9664 : index
// CHECK-DAG:     %[[C2688:.*]] = arith.constant 2688 : index
// CHECK:         %[[EMPTY:.*]] = tensor.empty() : tensor<64x12352xf32>
// CHECK:         scf.for %{{.*}} = %{{.*}} to %[[C9664]] step %[[C4832]]
// CHECK:           scf.for {{.*}} -> (tensor<151x27x32xf32>)
// CHECK:           scf.for {{.*}} -> (tensor<64x4832xf32>)
// CHECK:             scf.for {{.*}} -> (tensor<64x4832xf32>)
// CHECK:               scf.for {{.*}} iter_args(%{{.*}} = %[[Z]]) -> (vector<8x32xf32>)
// CHECK:         %[[BLOCKS:.*]] = tensor.insert_slice %{{.*}} into %[[EMPTY]][0, 0] [64, 9664]
// CHECK:         scf.for {{.*}} to %[[C2688]] {{.*}} -> (tensor<84x27x32xf32>)
// CHECK:         scf.for {{.*}} to %[[C2688]] {{.*}} -> (tensor<64x2688xf32>)
// CHECK:           scf.for {{.*}} -> (tensor<64x2688xf32>)
// CHECK:             scf.for {{.*}} iter_args(%{{.*}} = %[[Z]]) -> (vector<8x32xf32>)
// CHECK:         tensor.insert_slice %{{.*}} into %[[BLOCKS]][0, 9664] [64, 2688]
// CHECK-NOT:     linalg.
func.func @mm_one_block(%arg0: memref<64x27xf32>, %arg1: memref<27x12352xf32>, %arg2: memref<64x12352xf32>) attributes {llvm.emit_c_interface} {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = bufferization.to_tensor %arg0 restrict : memref<64x27xf32> to tensor<64x27xf32>
  %1 = bufferization.to_tensor %arg1 restrict : memref<27x12352xf32> to tensor<27x12352xf32>
  %2 = tensor.empty() : tensor<64x12352xf32>
  %3 = linalg.fill ins(%cst : f32) outs(%2 : tensor<64x12352xf32>) -> tensor<64x12352xf32>
  %4 = linalg.matmul ins(%0, %1 : tensor<64x27xf32>, tensor<27x12352xf32>) outs(%3 : tensor<64x12352xf32>) -> tensor<64x12352xf32>
  bufferization.materialize_in_destination %4 in restrict writable %arg2 : (tensor<64x12352xf32>, memref<64x12352xf32>) -> ()
  return
}

// -----

// f64: two zmm of 8 lanes per row; on AVX2 two ymm of 4 lanes, 4 rows.
// CHECK-LABEL: func.func @mm_f64(
// CHECK:         vector.contract {{.*}} : vector<8x4xf64>, vector<4x16xf64> into vector<8x16xf64>
// CHECK-NOT:     linalg.
// AVX2-LABEL: func.func @mm_f64(
// AVX2:         vector.contract {{.*}} : vector<4x4xf64>, vector<4x8xf64> into vector<4x8xf64>
func.func @mm_f64(%arg0: memref<24x40xf64>, %arg1: memref<40x48xf64>, %arg2: memref<24x48xf64>) attributes {llvm.emit_c_interface} {
  %cst = arith.constant 0.000000e+00 : f64
  %0 = bufferization.to_tensor %arg0 restrict : memref<24x40xf64> to tensor<24x40xf64>
  %1 = bufferization.to_tensor %arg1 restrict : memref<40x48xf64> to tensor<40x48xf64>
  %2 = tensor.empty() : tensor<24x48xf64>
  %3 = linalg.fill ins(%cst : f64) outs(%2 : tensor<24x48xf64>) -> tensor<24x48xf64>
  %4 = linalg.matmul ins(%0, %1 : tensor<24x40xf64>, tensor<40x48xf64>) outs(%3 : tensor<24x48xf64>) -> tensor<24x48xf64>
  bufferization.materialize_in_destination %4 in restrict writable %arg2 : (tensor<24x48xf64>, memref<24x48xf64>) -> ()
  return
}

// -----

// Awkward sizes keep full tiles: 37 rows (prime) are 8-row tiles up to 32, and the rows loop
// is peeled as symbolic rows are: the last 5 rows are tiled a row at a time (cut off as a
// product of their own, they would keep a whole fill and any epilogue apart); 23 columns are
// one vector of 16 and a row of 7 (not one row of 23: a register tile of one vector and a part
// of one ran 5-7x slower), each column part with a fill of its own, so that every register
// tile starts from zeros (no whole fill, read back); 19 (prime) reduction steps go one at a
// time; the unit batch dimension is dropped from the vector ops.
// CHECK-LABEL: func.func @bmm_odd(
// CHECK-DAG:     %[[C5:.*]] = arith.constant 5 : index
// CHECK-DAG:     %[[C32:.*]] = arith.constant 32 : index
// CHECK-DAG:     %[[Z16:.*]] = arith.constant dense<0.000000e+00> : vector<16xf32>
// CHECK-DAG:     %[[Z8x16:.*]] = arith.constant dense<0.000000e+00> : vector<8x16xf32>
// CHECK-DAG:     %[[Z8x7:.*]] = arith.constant dense<0.000000e+00> : vector<8x7xf32>
// CHECK:         %[[EMPTY:.*]] = tensor.empty() : tensor<4x37x23xf32>
// CHECK:         scf.for {{.*}} -> (tensor<4x37x16xf32>)
// CHECK:           scf.for %{{.*}} = %{{.*}} to %[[C32]] step %{{.*}} -> (tensor<4x37x16xf32>)
// CHECK:             scf.for {{.*}} iter_args(%{{.*}} = %[[Z8x16]]) -> (vector<8x16xf32>)
// CHECK:               vector.contract {{.*}} : vector<8x1xf32>, vector<1x16xf32> into vector<8x16xf32>
// CHECK:           scf.for %{{.*}} = %{{.*}} to %[[C5]] step %{{.*}} -> (tensor<1x5x16xf32>)
// CHECK:             scf.for {{.*}} iter_args(%{{.*}} = %[[Z16]]) -> (vector<16xf32>)
// CHECK:               vector.contract {{.*}} : vector<1xf32>, vector<1x16xf32> into vector<16xf32>
// CHECK:         %[[LEFT:.*]] = tensor.insert_slice %{{.*}} into %[[EMPTY]][0, 0, 0] [4, 37, 16]
// CHECK:         scf.for {{.*}} -> (tensor<4x37x7xf32>)
// CHECK:           scf.for {{.*}} -> (tensor<4x37x7xf32>)
// CHECK:             scf.for {{.*}} iter_args(%{{.*}} = %[[Z8x7]]) -> (vector<8x7xf32>)
// CHECK:               vector.contract {{.*}} : vector<8x1xf32>, vector<1x7xf32> into vector<8x7xf32>
// CHECK:           scf.for {{.*}} -> (tensor<1x5x7xf32>)
// CHECK:             scf.for {{.*}} -> (vector<7xf32>)
// CHECK:         tensor.insert_slice %{{.*}} into %[[LEFT]][0, 0, 16] [4, 37, 7]
// CHECK-NOT:     linalg.
func.func @bmm_odd(%arg0: memref<4x37x19xf32>, %arg1: memref<4x19x23xf32>, %arg2: memref<4x37x23xf32>) attributes {llvm.emit_c_interface} {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = bufferization.to_tensor %arg0 restrict : memref<4x37x19xf32> to tensor<4x37x19xf32>
  %1 = bufferization.to_tensor %arg1 restrict : memref<4x19x23xf32> to tensor<4x19x23xf32>
  %2 = tensor.empty() : tensor<4x37x23xf32>
  %3 = linalg.fill ins(%cst : f32) outs(%2 : tensor<4x37x23xf32>) -> tensor<4x37x23xf32>
  %4 = linalg.batch_matmul ins(%0, %1 : tensor<4x37x19xf32>, tensor<4x19x23xf32>) outs(%3 : tensor<4x37x23xf32>) -> tensor<4x37x23xf32>
  bufferization.materialize_in_destination %4 in restrict writable %arg2 : (tensor<4x37x23xf32>, memref<4x37x23xf32>) -> ()
  return
}

// -----

// 1000 columns are no whole number of vectors: 31 two-vector tiles up to column 992, then
// one 8-column tile, each part's register tiles starting from zeros.
// CHECK-LABEL: func.func @mm_cols(
// CHECK-DAG:     %[[Z8x8:.*]] = arith.constant dense<0.000000e+00> : vector<8x8xf32>
// CHECK-DAG:     %[[Z8x32:.*]] = arith.constant dense<0.000000e+00> : vector<8x32xf32>
// CHECK:         %[[EMPTY:.*]] = tensor.empty() : tensor<16x1000xf32>
// CHECK:         scf.for {{.*}} -> (tensor<16x992xf32>)
// CHECK:           scf.for {{.*}} -> (tensor<16x992xf32>)
// CHECK:             scf.for {{.*}} iter_args(%{{.*}} = %[[Z8x32]]) -> (vector<8x32xf32>)
// CHECK:               vector.contract {{.*}} : vector<8x4xf32>, vector<4x32xf32> into vector<8x32xf32>
// CHECK:         %[[MAIN:.*]] = tensor.insert_slice %{{.*}} into %[[EMPTY]][0, 0] [16, 992]
// CHECK:         scf.for {{.*}} -> (tensor<16x8xf32>)
// CHECK:           scf.for {{.*}} iter_args(%{{.*}} = %[[Z8x8]]) -> (vector<8x8xf32>)
// CHECK:             vector.contract {{.*}} : vector<8x4xf32>, vector<4x8xf32> into vector<8x8xf32>
// CHECK:         tensor.insert_slice %{{.*}} into %[[MAIN]][0, 992] [16, 8]
// CHECK-NOT:     linalg.
func.func @mm_cols(%arg0: memref<16x64xf32>, %arg1: memref<64x1000xf32>, %arg2: memref<16x1000xf32>) attributes {llvm.emit_c_interface} {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = bufferization.to_tensor %arg0 restrict : memref<16x64xf32> to tensor<16x64xf32>
  %1 = bufferization.to_tensor %arg1 restrict : memref<64x1000xf32> to tensor<64x1000xf32>
  %2 = tensor.empty() : tensor<16x1000xf32>
  %3 = linalg.fill ins(%cst : f32) outs(%2 : tensor<16x1000xf32>) -> tensor<16x1000xf32>
  %4 = linalg.matmul ins(%0, %1 : tensor<16x64xf32>, tensor<64x1000xf32>) outs(%3 : tensor<16x1000xf32>) -> tensor<16x1000xf32>
  bufferization.materialize_in_destination %4 in restrict writable %arg2 : (tensor<16x1000xf32>, memref<16x1000xf32>) -> ()
  return
}

// -----

// An operand computed by a linalg op (here a transpose) is not pulled into the tile loops,
// where it would be recomputed per tile; the fill then stays outside too.
// CHECK-LABEL: func.func @mm_transposed(
// CHECK:         %[[T:.*]] = linalg.generic
// CHECK:         %[[FILL:.*]] = linalg.fill
// CHECK:         vector.transfer_read %[[FILL]]
// CHECK:         scf.for
// CHECK:           vector.transfer_read %[[T]]
// CHECK:           vector.contract {{.*}} : vector<8x4xf32>, vector<4x32xf32> into vector<8x32xf32>
// CHECK-NOT:     linalg.matmul
func.func @mm_transposed(%arg0: memref<8x16xf32>, %arg1: memref<32x16xf32>, %arg2: memref<8x32xf32>) attributes {llvm.emit_c_interface} {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = bufferization.to_tensor %arg0 restrict : memref<8x16xf32> to tensor<8x16xf32>
  %1 = bufferization.to_tensor %arg1 restrict : memref<32x16xf32> to tensor<32x16xf32>
  %2 = tensor.empty() : tensor<16x32xf32>
  %t = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d1, d0)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%1 : tensor<32x16xf32>) outs(%2 : tensor<16x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<16x32xf32>
  %3 = tensor.empty() : tensor<8x32xf32>
  %4 = linalg.fill ins(%cst : f32) outs(%3 : tensor<8x32xf32>) -> tensor<8x32xf32>
  %5 = linalg.matmul ins(%0, %t : tensor<8x16xf32>, tensor<16x32xf32>) outs(%4 : tensor<8x32xf32>) -> tensor<8x32xf32>
  bufferization.materialize_in_destination %5 in restrict writable %arg2 : (tensor<8x32xf32>, memref<8x32xf32>) -> ()
  return
}

// -----

// Integer products keep the scalar path.
// CHECK-LABEL: func.func @mm_i32(
// CHECK:         linalg.matmul
// CHECK-NOT:     vector.
func.func @mm_i32(%arg0: memref<8x16xi32>, %arg1: memref<16x32xi32>, %arg2: memref<8x32xi32>) attributes {llvm.emit_c_interface} {
  %c0 = arith.constant 0 : i32
  %0 = bufferization.to_tensor %arg0 restrict : memref<8x16xi32> to tensor<8x16xi32>
  %1 = bufferization.to_tensor %arg1 restrict : memref<16x32xi32> to tensor<16x32xi32>
  %2 = tensor.empty() : tensor<8x32xi32>
  %3 = linalg.fill ins(%c0 : i32) outs(%2 : tensor<8x32xi32>) -> tensor<8x32xi32>
  %4 = linalg.matmul ins(%0, %1 : tensor<8x16xi32>, tensor<16x32xi32>) outs(%3 : tensor<8x32xi32>) -> tensor<8x32xi32>
  bufferization.materialize_in_destination %4 in restrict writable %arg2 : (tensor<8x32xi32>, memref<8x32xi32>) -> ()
  return
}
