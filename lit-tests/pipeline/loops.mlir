// RUN: fxmlir-opt --pipeline loops --split-input-file %s | FileCheck %s --enable-var-scope

// The loops stage (convert-linalg-to-loops, vector transfers to scf, chunk loops to OpenMP) on
// bufferized code: every structured op becomes an scf.for nest over memref.load and
// memref.store; no linalg op remains. Loops stay structured for the outline stage, which moves
// each nest into a function of its own; the llvm stage turns them into branches.

// CHECK-LABEL: func.func @chain(
// CHECK-SAME:      %[[ARG0:[a-zA-Z0-9_]+]]: memref<4x8xf32>
// CHECK-SAME:      %[[ARG1:[a-zA-Z0-9_]+]]: memref<8xf32>
// CHECK-SAME:      %[[ARG2:[a-zA-Z0-9_]+]]: memref<4x8xf32>
// CHECK-DAG:   %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG:   %[[C1:.*]] = arith.constant 1 : index
// CHECK-DAG:   %[[C4:.*]] = arith.constant 4 : index
// CHECK-DAG:   %[[C8:.*]] = arith.constant 8 : index
// CHECK:       scf.for %[[I:.*]] = %[[C0]] to %[[C4]] step %[[C1]] {
// CHECK-NEXT:    scf.for %[[J:.*]] = %[[C0]] to %[[C8]] step %[[C1]] {
// CHECK-NEXT:      %[[X:.*]] = memref.load %[[ARG0]][%[[I]], %[[J]]] : memref<4x8xf32>
// CHECK-NEXT:      %[[Y:.*]] = memref.load %[[ARG1]][%[[J]]] : memref<8xf32>
// CHECK-NEXT:      %[[S:.*]] = arith.addf %[[X]], %[[Y]] : f32
// CHECK-NEXT:      %[[M:.*]] = arith.maximumf %[[S]], %{{.*}} : f32
// CHECK-NEXT:      %[[P:.*]] = arith.mulf %[[M]], %{{.*}} : f32
// CHECK-NEXT:      memref.store %[[P]], %[[ARG2]][%[[I]], %[[J]]] : memref<4x8xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:  }
// CHECK-NEXT:  return
// CHECK-NOT:   {{linalg|affine}}.
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

// fill, matmul (a three-deep nest accumulating in the buffer) and the epilogue, in that order.
// CHECK-LABEL: func.func @linear_relu(
// CHECK-SAME:      %[[ARG0:[a-zA-Z0-9_]+]]: memref<4x8xf32>
// CHECK-SAME:      %[[ARG1:[a-zA-Z0-9_]+]]: memref<8x16xf32>
// CHECK-SAME:      %[[ARG2:[a-zA-Z0-9_]+]]: memref<16xf32>
// CHECK-SAME:      %[[ARG3:[a-zA-Z0-9_]+]]: memref<4x16xf32>
// CHECK-NOT:   linalg.
// CHECK:       %[[BUF:.*]] = memref.alloc() {{.*}} : memref<4x16xf32>
// CHECK:       scf.for
// CHECK-NEXT:    scf.for
// CHECK-NEXT:      memref.store %{{.*}}, %[[BUF]][%{{.*}}, %{{.*}}] : memref<4x16xf32>
// CHECK:       scf.for %[[I:.*]] = 
// CHECK-NEXT:    scf.for %[[J:.*]] = 
// CHECK-NEXT:      scf.for %[[K:.*]] = 
// CHECK-NEXT:        %[[A:.*]] = memref.load %[[ARG0]][%[[I]], %[[K]]] : memref<4x8xf32>
// CHECK-NEXT:        %[[B:.*]] = memref.load %[[ARG1]][%[[K]], %[[J]]] : memref<8x16xf32>
// CHECK-NEXT:        %[[C:.*]] = memref.load %[[BUF]][%[[I]], %[[J]]] : memref<4x16xf32>
// CHECK-NEXT:        %[[P:.*]] = arith.mulf %[[A]], %[[B]] : f32
// CHECK-NEXT:        %[[S:.*]] = arith.addf %[[C]], %[[P]] : f32
// CHECK-NEXT:        memref.store %[[S]], %[[BUF]][%[[I]], %[[J]]] : memref<4x16xf32>
// CHECK:       memref.load %[[BUF]]
// CHECK:       memref.load %[[ARG2]]
// CHECK:       arith.maximumf
// CHECK:       memref.store %{{.*}}, %[[ARG3]]
// CHECK:       memref.dealloc %[[BUF]]
// CHECK-NOT:   linalg.
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

// Strided reads index the strided memref; views and copies stay as they are (the llvm stage
// expands their strided metadata).
// CHECK-LABEL: func.func @strided(
// CHECK-SAME:      %[[ARG0:[a-zA-Z0-9_]+]]: memref<4x8xf32, strided<[1, 4]>>
// CHECK-SAME:      %[[ARG1:[a-zA-Z0-9_]+]]: memref<4x4xf32>
// CHECK:       %[[BUF:.*]] = memref.alloc()
// CHECK:       memref.load %[[ARG0]][%{{.*}}, %{{.*}}] : memref<4x8xf32, strided<[1, 4]>>
// CHECK:       math.log
// CHECK:       %[[VIEW:.*]] = memref.subview %[[BUF]][0, 0] [4, 4] [1, 1]
// CHECK:       memref.copy %[[VIEW]], %[[ARG1]]
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @strided(%arg0: memref<4x8xf32, strided<[1, 4]>>, %arg1: memref<4x4xf32>, %arg2: memref<4x8xf32>) attributes {llvm.emit_c_interface} {
  %alloc = memref.alloc() {alignment = 64 : i64} : memref<4x8xf32>
  linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0 : memref<4x8xf32, strided<[1, 4]>>) outs(%alloc : memref<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = math.log %in : f32
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

// -----

// A pooling window: the loops over the 3x3 window (their induction variables added to the
// output position's, `oh * 2 + kh`) are marked for LLVM's full unrolling; the output loops are
// not. LLVM unrolls no other loop.
// CHECK:       #[[$UNROLL:.*]] = #llvm.loop_unroll<full = true>
// CHECK:       #[[$ANNOTATION:.*]] = #llvm.loop_annotation<unroll = #[[$UNROLL]]>
// CHECK-LABEL: func.func @max_pool(
// CHECK:         scf.for %[[OH:[a-z0-9]+]] =
// CHECK-NEXT:      scf.for %[[OW:[a-z0-9]+]] =
// CHECK-NEXT:        scf.for %[[KH:[a-z0-9]+]] =
// CHECK-NEXT:          scf.for %[[KW:[a-z0-9]+]] =
// CHECK-NEXT:            affine.apply #{{.*}}(%[[OH]], %[[KH]])
// CHECK-NEXT:            affine.apply #{{.*}}(%[[OW]], %[[KW]])
// CHECK:               } {loop_annotation = #[[$ANNOTATION]]}
// CHECK-NEXT:        } {loop_annotation = #[[$ANNOTATION]]}
// CHECK-NEXT:      } loc(
// CHECK-NEXT:    } loc(
func.func @max_pool(%in: memref<1x1x6x6xf32>, %win: memref<3x3xf32>, %out: memref<1x1x2x2xf32>) {
  linalg.pooling_nchw_max {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>} ins(%in, %win : memref<1x1x6x6xf32>, memref<3x3xf32>) outs(%out : memref<1x1x2x2xf32>)
  return
}

// -----

// A reduction block loop (four iterations) combined with the loop inside it is no window: not
// marked.
// CHECK-LABEL: func.func @blocked(
// CHECK-NOT:     loop_annotation
func.func @blocked(%a: memref<64xf32>, %out: memref<f32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %c64 = arith.constant 64 : index
  scf.for %b = %c0 to %c64 step %c16 {
    scf.for %k = %c0 to %c16 step %c1 {
      %i = affine.apply affine_map<(d0, d1) -> (d0 + d1)>(%b, %k)
      %x = memref.load %a[%i] : memref<64xf32>
      %s = memref.load %out[] : memref<f32>
      %t = arith.addf %s, %x : f32
      memref.store %t, %out[] : memref<f32>
    }
  }
  return
}
