// RUN: fxmlir-opt --pipeline parallel --target x86-64-v4,l2=1M --threads 2 %s | FileCheck %s --enable-var-scope
// RUN: fxmlir-opt --pipeline parallel --target x86-64-v4,l2=1M --threads 2 %s | fxmlir-opt --pipeline bufferize | FileCheck %s --check-prefix=BUF

// Row groups (src/pipeline/rows.rs): the passes of a softmax and of a layer norm whose tensor
// outgrows a thread's L2 run row by row. The consumer is split across threads, then tiled by
// blocks of rows (16 KiB: two rows of 2048, sixteen of 256), and its members (the fills, the
// reductions, the exponentials, the statistics) are fused into the row loop; no member stays
// a loop nest of its own. A softmax whose 4 KiB stay in L2 keeps its ops one by one.

// CHECK-LABEL: func.func @rows(
// The softmax over 4096 x 2048: rows split in two, then blocks of two rows.
// CHECK:       scf.forall (%{{.*}}) in (2) shared_outs(%{{.*}}) -> (tensor<4096x2048xf32>)
// CHECK:         scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}}) -> (tensor<2048x2048xf32>)
// CHECK:           %[[MAXINIT:.*]] = linalg.fill {{.*}} -> tensor<2xf32>
// CHECK:           %[[MAX:.*]] = linalg.generic {{.*}} ins(%{{.*}} : tensor<2x2048xf32>) outs(%[[MAXINIT]] : tensor<2xf32>)
// CHECK:             arith.maximumf
// CHECK:           %[[EXPS:.*]] = linalg.generic {{.*}} ins(%{{.*}}, %[[MAX]] : tensor<2x2048xf32>, tensor<2xf32>)
// CHECK:             math.exp
// CHECK:           %[[SUMINIT:.*]] = linalg.fill {{.*}} -> tensor<2xf32>
// CHECK:           %[[SUM:.*]] = linalg.generic {{.*}} ins(%[[EXPS]] : tensor<2x2048xf32>) outs(%[[SUMINIT]] : tensor<2xf32>)
// CHECK:           linalg.generic {{.*}} ins(%[[EXPS]], %[[SUM]] : tensor<2x2048xf32>, tensor<2xf32>)
// CHECK:             arith.divf
// CHECK:             arith.mulf
// CHECK:         scf.forall.in_parallel
// The layer norm over 8192 x 256: blocks of sixteen rows; its sum and sum of squares start
// from one fill of their own.
// CHECK:       scf.forall (%{{.*}}) in (2) shared_outs(%{{.*}}) -> (tensor<8192x256xf32>)
// CHECK:         scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}}) -> (tensor<4096x256xf32>)
// CHECK:           %[[ZERO:.*]] = linalg.fill {{.*}} -> tensor<16xf32>
// CHECK:           %[[S1:.*]] = linalg.generic {{.*}} ins(%{{.*}} : tensor<16x256xf32>) outs(%[[ZERO]] : tensor<16xf32>)
// CHECK:           %[[S2:.*]] = linalg.generic {{.*}} ins(%{{.*}}, %[[S1]] : tensor<16x256xf32>, tensor<16xf32>) outs(%[[ZERO]] : tensor<16xf32>)
// CHECK:           %[[STATS:.*]]:2 = linalg.generic {{.*}} ins(%[[S1]], %[[S2]] : tensor<16xf32>, tensor<16xf32>)
// CHECK:             math.rsqrt
// CHECK:           linalg.generic {{.*}} ins(%{{.*}}, %[[STATS]]#0, %[[STATS]]#1, %{{.*}} : tensor<16x256xf32>, tensor<16xf32>, tensor<16xf32>, tensor<256xf32>)
// CHECK:         scf.forall.in_parallel
// The small softmax: four ops on the whole 16 x 64, outside any loop.
// CHECK-NOT:   scf.for
// CHECK:       linalg.generic {{.*}} ins(%{{.*}} : tensor<16x64xf32>) outs(%{{.*}} : tensor<16xf32>)
// CHECK:       linalg.generic {{.*}} ins(%{{.*}}, %{{.*}} : tensor<16x64xf32>, tensor<16xf32>) outs(%{{.*}} : tensor<16x64xf32>)
// CHECK:       linalg.generic {{.*}} ins(%{{.*}} : tensor<16x64xf32>) outs(%{{.*}} : tensor<16xf32>)
// CHECK:       linalg.generic {{.*}} ins(%{{.*}}, %{{.*}} : tensor<16x64xf32>, tensor<16xf32>) outs(%{{.*}} : tensor<16x64xf32>)
// CHECK:       return

// After bufferisation, a block's per-row values and exponentials live in buffers allocated
// once per thread, before the row loop (`buffer-loop-hoisting`), not once per block.
// BUF-LABEL: func.func @rows(
// BUF:         scf.forall
// BUF:           memref.alloc() {{.*}} : memref<2xf32>
// BUF:           memref.alloc() {{.*}} : memref<2x2048xf32>
// BUF:           memref.alloc() {{.*}} : memref<2xf32>
// BUF-NEXT:      scf.for
// BUF-NOT:         memref.alloc
// BUF:           memref.dealloc
// BUF:         scf.forall
// BUF-COUNT-4:   memref.alloc() {{.*}} : memref<16xf32>
// BUF-NEXT:      scf.for
// BUF-NOT:         memref.alloc
// BUF:           memref.dealloc
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
#map2 = affine_map<(d0) -> (d0)>
#map3 = affine_map<(d0, d1) -> (d1)>
module {
  func.func @rows(%arg0: memref<4096x2048xf32>, %arg1: memref<8192x256xf32>, %arg2: memref<256xf32>, %arg3: memref<16x64xf32>, %arg4: memref<4096x2048xf32>, %arg5: memref<8192x256xf32>, %arg6: memref<16x64xf32>) attributes {llvm.emit_c_interface} {
    %cst = arith.constant 9.99999974E-6 : f32
    %cst_0 = arith.constant 3.906250e-03 : f32
    %cst_1 = arith.constant 1.000000e+00 : f32
    %cst_2 = arith.constant 0.000000e+00 : f32
    %cst_3 = arith.constant -8.700000e+01 : f32
    %cst_4 = arith.constant 0xFF800000 : f32
    %0 = bufferization.to_tensor %arg0 restrict : memref<4096x2048xf32> to tensor<4096x2048xf32>
    %1 = bufferization.to_tensor %arg1 restrict : memref<8192x256xf32> to tensor<8192x256xf32>
    %2 = bufferization.to_tensor %arg2 restrict : memref<256xf32> to tensor<256xf32>
    %3 = bufferization.to_tensor %arg3 restrict : memref<16x64xf32> to tensor<16x64xf32>
    %4 = tensor.empty() : tensor<4096xf32>
    %5 = linalg.fill ins(%cst_4 : f32) outs(%4 : tensor<4096xf32>) -> tensor<4096xf32>
    %6 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%0 : tensor<4096x2048xf32>) outs(%5 : tensor<4096xf32>) {
    ^bb0(%in: f32, %out: f32):
      %29 = arith.maximumf %out, %in fastmath<reassoc> : f32
      linalg.yield %29 : f32
    } -> tensor<4096xf32>
    %7 = tensor.empty() : tensor<4096x2048xf32>
    %8 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%0, %6 : tensor<4096x2048xf32>, tensor<4096xf32>) outs(%7 : tensor<4096x2048xf32>) {
    ^bb0(%in: f32, %in_5: f32, %out: f32):
      %29 = arith.subf %in, %in_5 : f32
      %30 = arith.maximumf %29, %cst_3 : f32
      %31 = math.exp %30 : f32
      %32 = arith.cmpf olt, %29, %cst_3 : f32
      %33 = arith.select %32, %cst_2, %31 : f32
      linalg.yield %33 : f32
    } -> tensor<4096x2048xf32>
    %9 = linalg.fill ins(%cst_2 : f32) outs(%4 : tensor<4096xf32>) -> tensor<4096xf32>
    %10 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%8 : tensor<4096x2048xf32>) outs(%9 : tensor<4096xf32>) {
    ^bb0(%in: f32, %out: f32):
      %29 = arith.addf %out, %in fastmath<reassoc> : f32
      linalg.yield %29 : f32
    } -> tensor<4096xf32>
    %11 = bufferization.to_tensor %arg4 restrict writable : memref<4096x2048xf32> to tensor<4096x2048xf32>
    %12 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%8, %10 : tensor<4096x2048xf32>, tensor<4096xf32>) outs(%11 : tensor<4096x2048xf32>) {
    ^bb0(%in: f32, %in_5: f32, %out: f32):
      %29 = arith.divf %cst_1, %in_5 : f32
      %30 = arith.mulf %in, %29 : f32
      linalg.yield %30 : f32
    } -> tensor<4096x2048xf32>
    %13 = tensor.empty() : tensor<8192xf32>
    %14 = linalg.fill ins(%cst_2 : f32) outs(%13 : tensor<8192xf32>) -> tensor<8192xf32>
    %15 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%1 : tensor<8192x256xf32>) outs(%14 : tensor<8192xf32>) {
    ^bb0(%in: f32, %out: f32):
      %29 = arith.addf %out, %in fastmath<reassoc> : f32
      linalg.yield %29 : f32
    } -> tensor<8192xf32>
    %16 = linalg.generic {indexing_maps = [#map, #map1, #map1], iterator_types = ["parallel", "reduction"]} ins(%1, %15 : tensor<8192x256xf32>, tensor<8192xf32>) outs(%14 : tensor<8192xf32>) {
    ^bb0(%in: f32, %in_5: f32, %out: f32):
      %29 = arith.mulf %in_5, %cst_0 : f32
      %30 = arith.subf %in, %29 : f32
      %31 = arith.mulf %30, %30 : f32
      %32 = arith.addf %out, %31 fastmath<reassoc> : f32
      linalg.yield %32 : f32
    } -> tensor<8192xf32>
    %17:2 = linalg.generic {indexing_maps = [#map2, #map2, #map2, #map2], iterator_types = ["parallel"]} ins(%15, %16 : tensor<8192xf32>, tensor<8192xf32>) outs(%13, %13 : tensor<8192xf32>, tensor<8192xf32>) {
    ^bb0(%in: f32, %in_5: f32, %out: f32, %out_6: f32):
      %29 = arith.mulf %in, %cst_0 : f32
      %30 = arith.mulf %in_5, %cst_0 : f32
      %31 = arith.addf %30, %cst : f32
      %32 = math.rsqrt %31 : f32
      linalg.yield %29, %32 : f32, f32
    } -> (tensor<8192xf32>, tensor<8192xf32>)
    %18 = bufferization.to_tensor %arg5 restrict writable : memref<8192x256xf32> to tensor<8192x256xf32>
    %19 = linalg.generic {indexing_maps = [#map, #map1, #map1, #map3, #map], iterator_types = ["parallel", "parallel"]} ins(%1, %17#0, %17#1, %2 : tensor<8192x256xf32>, tensor<8192xf32>, tensor<8192xf32>, tensor<256xf32>) outs(%18 : tensor<8192x256xf32>) {
    ^bb0(%in: f32, %in_5: f32, %in_6: f32, %in_7: f32, %out: f32):
      %29 = arith.subf %in, %in_5 : f32
      %30 = arith.mulf %29, %in_6 : f32
      %31 = arith.mulf %30, %in_7 : f32
      %32 = arith.addf %31, %in_7 : f32
      linalg.yield %32 : f32
    } -> tensor<8192x256xf32>
    %20 = tensor.empty() : tensor<16xf32>
    %21 = linalg.fill ins(%cst_4 : f32) outs(%20 : tensor<16xf32>) -> tensor<16xf32>
    %22 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%3 : tensor<16x64xf32>) outs(%21 : tensor<16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %29 = arith.maximumf %out, %in fastmath<reassoc> : f32
      linalg.yield %29 : f32
    } -> tensor<16xf32>
    %23 = tensor.empty() : tensor<16x64xf32>
    %24 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%3, %22 : tensor<16x64xf32>, tensor<16xf32>) outs(%23 : tensor<16x64xf32>) {
    ^bb0(%in: f32, %in_5: f32, %out: f32):
      %29 = arith.subf %in, %in_5 : f32
      %30 = arith.maximumf %29, %cst_3 : f32
      %31 = math.exp %30 : f32
      %32 = arith.cmpf olt, %29, %cst_3 : f32
      %33 = arith.select %32, %cst_2, %31 : f32
      linalg.yield %33 : f32
    } -> tensor<16x64xf32>
    %25 = linalg.fill ins(%cst_2 : f32) outs(%20 : tensor<16xf32>) -> tensor<16xf32>
    %26 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%24 : tensor<16x64xf32>) outs(%25 : tensor<16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %29 = arith.addf %out, %in fastmath<reassoc> : f32
      linalg.yield %29 : f32
    } -> tensor<16xf32>
    %27 = bufferization.to_tensor %arg6 restrict writable : memref<16x64xf32> to tensor<16x64xf32>
    %28 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%24, %26 : tensor<16x64xf32>, tensor<16xf32>) outs(%27 : tensor<16x64xf32>) {
    ^bb0(%in: f32, %in_5: f32, %out: f32):
      %29 = arith.divf %cst_1, %in_5 : f32
      %30 = arith.mulf %in, %29 : f32
      linalg.yield %30 : f32
    } -> tensor<16x64xf32>
    bufferization.materialize_in_destination %12 in writable %arg4 : (tensor<4096x2048xf32>, memref<4096x2048xf32>) -> ()
    bufferization.materialize_in_destination %19 in writable %arg5 : (tensor<8192x256xf32>, memref<8192x256xf32>) -> ()
    bufferization.materialize_in_destination %28 in writable %arg6 : (tensor<16x64xf32>, memref<16x64xf32>) -> ()
    return
  }
}

