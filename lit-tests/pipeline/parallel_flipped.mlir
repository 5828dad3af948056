// RUN: fxmlir-opt --pipeline parallel --threads 2 %s 2>&1 | FileCheck %s

// An op reading an operand backwards along a loop (a transposed convolution's flipped kernel)
// stays on one thread: tiling computes that operand's slices as if every read went forwards,
// so any split made invalid IR and the whole stage was skipped (a resnet18 training step's
// backward).
// CHECK-NOT:   warning
// CHECK-LABEL: func.func @flip_rows(
// CHECK-NOT:   scf.forall
// CHECK:       linalg.generic {{.*}} ins(%{{.*}} : tensor<64x1024xf32>) outs(%{{.*}} : tensor<64x1024xf32>)
// CHECK-NOT:   warning
#flip = affine_map<(d0, d1) -> (-d0 + 63, d1)>
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @flip_rows(%arg0: memref<64x1024xf32>, %arg1: memref<64x1024xf32>) attributes {llvm.emit_c_interface} {
  %0 = bufferization.to_tensor %arg0 restrict : memref<64x1024xf32> to tensor<64x1024xf32>
  %1 = bufferization.to_tensor %arg1 restrict writable : memref<64x1024xf32> to tensor<64x1024xf32>
  %2 = linalg.generic {indexing_maps = [#flip, #id], iterator_types = ["parallel", "parallel"]} ins(%0 : tensor<64x1024xf32>) outs(%1 : tensor<64x1024xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<64x1024xf32>
  bufferization.materialize_in_destination %2 in writable %arg1 : (tensor<64x1024xf32>, memref<64x1024xf32>) -> ()
  return
}
