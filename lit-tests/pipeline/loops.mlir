// RUN: fxmlir-opt --pipeline loops --split-input-file %s | FileCheck %s --enable-var-scope

// The loops stage (convert-linalg-to-loops, expand-strided-metadata, lower-affine, scf-to-cf) on
// bufferized code: every structured op becomes a loop nest of cf branches over memref.load and
// memref.store; no linalg, scf or affine op remains.

// CHECK-LABEL: func.func @chain(
// CHECK-SAME:      %[[ARG0:[a-zA-Z0-9_]+]]: memref<4x8xf32>
// CHECK-SAME:      %[[ARG1:[a-zA-Z0-9_]+]]: memref<8xf32>
// CHECK-SAME:      %[[ARG2:[a-zA-Z0-9_]+]]: memref<4x8xf32>
// CHECK-DAG:   %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG:   %[[C1:.*]] = arith.constant 1 : index
// CHECK-DAG:   %[[C4:.*]] = arith.constant 4 : index
// CHECK-DAG:   %[[C8:.*]] = arith.constant 8 : index
// CHECK:       cf.br ^[[OUTER:bb[0-9]+]](%[[C0]] : index)
// CHECK:     ^[[OUTER]](%[[I:[0-9]+]]: index
// CHECK-NEXT:  %[[CI:.*]] = arith.cmpi slt, %[[I]], %[[C4]] : index
// CHECK-NEXT:  cf.cond_br %[[CI]], ^[[INNER:bb[0-9]+]](%[[C0]] : index), ^[[EXIT:bb[0-9]+]]
// CHECK:     ^[[INNER]](%[[J:[0-9]+]]: index
// CHECK-NEXT:  %[[CJ:.*]] = arith.cmpi slt, %[[J]], %[[C8]] : index
// CHECK-NEXT:  cf.cond_br %[[CJ]], ^[[BODY:bb[0-9]+]], ^[[LATCH:bb[0-9]+]]
// CHECK:     ^[[BODY]]:
// CHECK-NEXT:  %[[X:.*]] = memref.load %[[ARG0]][%[[I]], %[[J]]] : memref<4x8xf32>
// CHECK-NEXT:  %[[Y:.*]] = memref.load %[[ARG1]][%[[J]]] : memref<8xf32>
// CHECK-NEXT:  %[[S:.*]] = arith.addf %[[X]], %[[Y]] : f32
// CHECK-NEXT:  %[[M:.*]] = arith.maximumf %[[S]], %{{.*}} : f32
// CHECK-NEXT:  %[[P:.*]] = arith.mulf %[[M]], %{{.*}} : f32
// CHECK-NEXT:  memref.store %[[P]], %[[ARG2]][%[[I]], %[[J]]] : memref<4x8xf32>
// CHECK-NEXT:  %[[JN:.*]] = arith.addi %[[J]], %[[C1]] : index
// CHECK-NEXT:  cf.br ^[[INNER]](%[[JN]] : index)
// CHECK:     ^[[LATCH]]:
// CHECK-NEXT:  %[[IN:.*]] = arith.addi %[[I]], %[[C1]] : index
// CHECK-NEXT:  cf.br ^[[OUTER]](%[[IN]] : index)
// CHECK:     ^[[EXIT]]:
// CHECK-NEXT:  return
// CHECK-NOT:   {{linalg|scf|affine}}.
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
func.func @chain(%arg0: memref<4x8xf32>, %arg1: memref<8xf32>, %arg2: memref<4x8xf32>) attributes {llvm.emit_c_interface} {
  %cst = arith.constant 2.000000e+00 : f32
  %cst_0 = arith.constant 0.000000e+00 : f32
  linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0, %arg1 : memref<4x8xf32>, memref<8xf32>) outs(%arg2 : memref<4x8xf32>) {
  ^bb0(%in: f32, %in_1: f32, %out: f32):
    %0 = arith.addf %in, %in_1 : f32
    %1 = arith.maximumf %0, %cst_0 : f32
    %2 = arith.mulf %1, %cst : f32
    linalg.yield %2 : f32
  }
  return
}

// -----

// fill, matmul (a three-deep nest accumulating in the buffer) and the epilogue.
// CHECK-LABEL: func.func @linear_relu(
// CHECK-SAME:      %[[ARG0:[a-zA-Z0-9_]+]]: memref<4x8xf32>
// CHECK-SAME:      %[[ARG1:[a-zA-Z0-9_]+]]: memref<8x16xf32>
// CHECK-SAME:      %[[ARG2:[a-zA-Z0-9_]+]]: memref<16xf32>
// CHECK-SAME:      %[[ARG3:[a-zA-Z0-9_]+]]: memref<4x16xf32>
// CHECK-NOT:   {{linalg|scf}}.
// CHECK:       %[[BUF:.*]] = memref.alloc() {{.*}} : memref<4x16xf32>
// CHECK:       memref.store %{{.*}}, %[[BUF]][%{{[0-9]+}}, %{{[0-9]+}}] : memref<4x16xf32>
// CHECK:       %[[A:.*]] = memref.load %[[ARG0]][%[[I:[0-9]+]], %[[K:[0-9]+]]] : memref<4x8xf32>
// CHECK-NEXT:  %[[B:.*]] = memref.load %[[ARG1]][%[[K]], %[[J:[0-9]+]]] : memref<8x16xf32>
// CHECK-NEXT:  %[[C:.*]] = memref.load %[[BUF]][%[[I]], %[[J]]] : memref<4x16xf32>
// CHECK-NEXT:  %[[P:.*]] = arith.mulf %[[A]], %[[B]] : f32
// CHECK-NEXT:  %[[S:.*]] = arith.addf %[[C]], %[[P]] : f32
// CHECK-NEXT:  memref.store %[[S]], %[[BUF]][%[[I]], %[[J]]] : memref<4x16xf32>
// CHECK:       memref.load %[[BUF]]
// CHECK:       memref.load %[[ARG2]]
// CHECK:       arith.maximumf
// CHECK:       memref.store %{{.*}}, %[[ARG3]]
// CHECK:       memref.dealloc %[[BUF]]
// CHECK-NOT:   {{linalg|scf}}.
// CHECK:       return
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
func.func @linear_relu(%arg0: memref<4x8xf32>, %arg1: memref<8x16xf32>, %arg2: memref<16xf32>, %arg3: memref<4x16xf32>) attributes {llvm.emit_c_interface} {
  %cst = arith.constant 0.000000e+00 : f32
  %alloc = memref.alloc() {alignment = 64 : i64} : memref<4x16xf32>
  linalg.fill ins(%cst : f32) outs(%alloc : memref<4x16xf32>)
  linalg.matmul ins(%arg0, %arg1 : memref<4x8xf32>, memref<8x16xf32>) outs(%alloc : memref<4x16xf32>)
  linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%alloc, %arg2 : memref<4x16xf32>, memref<16xf32>) outs(%arg3 : memref<4x16xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %0 = arith.addf %in, %in_0 : f32
    %1 = arith.maximumf %0, %cst : f32
    linalg.yield %1 : f32
  }
  memref.dealloc %alloc : memref<4x16xf32>
  return
}

// -----

// Strided reads index the strided memref; expand-strided-metadata turns the subview into a
// reinterpret_cast of its base buffer.
// CHECK-LABEL: func.func @strided(
// CHECK-SAME:      %[[ARG0:[a-zA-Z0-9_]+]]: memref<4x8xf32, strided<[1, 4]>>
// CHECK-SAME:      %[[ARG1:[a-zA-Z0-9_]+]]: memref<4x4xf32>
// CHECK:       %[[BUF:.*]] = memref.alloc()
// CHECK:       memref.load %[[ARG0]][%{{[0-9]+}}, %{{[0-9]+}}] : memref<4x8xf32, strided<[1, 4]>>
// CHECK:       math.exp
// CHECK:       %[[RC:.*]] = memref.reinterpret_cast %[[BUF]] to offset: [0], sizes: [4, 4], strides: [8, 1] : memref<4x8xf32> to memref<4x4xf32, strided<[8, 1]>>
// CHECK-NOT:   memref.subview
// CHECK:       memref.copy %[[RC]], %[[ARG1]]
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @strided(%arg0: memref<4x8xf32, strided<[1, 4]>>, %arg1: memref<4x4xf32>, %arg2: memref<4x8xf32>) attributes {llvm.emit_c_interface} {
  %alloc = memref.alloc() {alignment = 64 : i64} : memref<4x8xf32>
  linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0 : memref<4x8xf32, strided<[1, 4]>>) outs(%alloc : memref<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = math.exp %in : f32
    linalg.yield %0 : f32
  }
  %subview = memref.subview %alloc[0, 0] [4, 4] [1, 1] : memref<4x8xf32> to memref<4x4xf32, strided<[8, 1]>>
  linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%alloc : memref<4x8xf32>) outs(%arg2 : memref<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.negf %in : f32
    linalg.yield %0 : f32
  }
  memref.copy %subview, %arg1 : memref<4x4xf32, strided<[8, 1]>> to memref<4x4xf32>
  memref.dealloc %alloc : memref<4x8xf32>
  return
}
