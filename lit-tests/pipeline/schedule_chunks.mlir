// RUN: fxmlir-opt --target=skylake-avx512,threads=2 --pipeline schedule %s \
// RUN:   | FileCheck %s --enable-var-scope --implicit-check-not=transform. --implicit-check-not=fxmlir.
// RUN: fxmlir-opt --target=znver3,threads=2 --pipeline schedule %s \
// RUN:   | FileCheck %s --check-prefix=AVX2

// Thread chunks of a product no even cut fits whole: `q @ kᵀ` over three heads of ViT's 197
// tokens (an odd batch, 197 rows and 197 columns). Its columns split into a main part of
// whole register tiles (192) and a rest of 5; the main part is cut into one chunk of 96
// columns per thread (three 8x32 tiles wide), and the rest runs on one thread after the
// chunks. Both parts keep the peeled rows (24 tiles of 8, then 5 single rows).
// CHECK-LABEL: func.func @scores(
// CHECK:         %[[FILL:.*]] = linalg.fill
// CHECK:         %[[MAIN:.*]] = scf.forall (%{{.*}}) in (2) {{.*}} -> (tensor<3x197x192xf32>)
// CHECK:           scf.for {{.*}} -> (tensor<3x197x96xf32>)
// CHECK:             vector.contract {{.*}} : vector<8x4xf32>, vector<4x32xf32> into vector<8x32xf32>
// CHECK:           scf.for {{.*}} -> (tensor<1x5x32xf32>)
// CHECK:             vector.contract {{.*}} : vector<4xf32>, vector<4x32xf32> into vector<32xf32>
// CHECK:           tensor.parallel_insert_slice {{.*}} [3, 197, 96] [1, 1, 1] : tensor<3x197x96xf32> into tensor<3x197x192xf32>
// CHECK:         %[[LEFT:.*]] = tensor.insert_slice %[[MAIN]] into %[[FILL]][0, 0, 0] [3, 197, 192]
// CHECK-NOT:     scf.forall
// CHECK:         scf.for {{.*}} -> (tensor<3x197x5xf32>)
// CHECK:           vector.contract {{.*}} : vector<8x4xf32>, vector<4x5xf32> into vector<8x5xf32>
// CHECK:         tensor.insert_slice %{{.*}} into %[[LEFT]][0, 0, 192] [3, 197, 5]
// CHECK-NOT:     linalg.
// AVX2:          scf.forall (%{{.*}}) in (2) {{.*}} -> (tensor<3x197x192xf32>)
// AVX2:            tensor.parallel_insert_slice {{.*}} : tensor<3x197x96xf32> into tensor<3x197x192xf32>
// AVX2-NOT:      scf.forall
func.func @scores(%arg0: memref<3x197x64xf32>, %arg1: memref<3x64x197xf32>, %arg2: memref<3x197x197xf32>) attributes {llvm.emit_c_interface} {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = bufferization.to_tensor %arg0 restrict : memref<3x197x64xf32> to tensor<3x197x64xf32>
  %1 = bufferization.to_tensor %arg1 restrict : memref<3x64x197xf32> to tensor<3x64x197xf32>
  %2 = tensor.empty() : tensor<3x197x197xf32>
  %3 = linalg.fill ins(%cst : f32) outs(%2 : tensor<3x197x197xf32>) -> tensor<3x197x197xf32>
  %4 = linalg.batch_matmul ins(%0, %1 : tensor<3x197x64xf32>, tensor<3x64x197xf32>) outs(%3 : tensor<3x197x197xf32>) -> tensor<3x197x197xf32>
  bufferization.materialize_in_destination %4 in restrict writable %arg2 : (tensor<3x197x197xf32>, memref<3x197x197xf32>) -> ()
  return
}
