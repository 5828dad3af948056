// RUN: fxmlir-opt --pipeline outline --split-input-file %s | FileCheck %s --enable-var-scope

// The outline stage on loop-level code: each top-level computation moves into a private,
// internal, noinline function (constants cloned in, everything else passed), called where it
// was; identical functions are merged (duplicate-function-elimination). Buffer management
// stays in the graph function. A memref argument whose buffer no other argument of the call
// shares is listed in `fxmlir.noalias` by the position of its data pointer in the LLVM
// signature (3 + 2 * rank fields per memref), for LLVM's `noalias`.

// Two identical nests on different buffers share one function; the reduction loop and the
// store of its result are one function (the store uses the loop's value).
// CHECK-LABEL: func.func @layers(
// CHECK-SAME:      %[[ARG0:[a-zA-Z0-9_]+]]: memref<4x8xf32>
// CHECK-SAME:      %[[ARG1:[a-zA-Z0-9_]+]]: memref<4x8xf32>
// CHECK-SAME:      %[[ARG2:[a-zA-Z0-9_]+]]: memref<4x8xf32>
// CHECK:         %[[BUF:.*]] = memref.alloc()
// CHECK-NEXT:    call @[[RELU:layers_outlined[0-9]+]](%[[ARG0]], %[[BUF]])
// CHECK-NEXT:    call @[[RELU]](%[[BUF]], %[[ARG1]])
// CHECK-NEXT:    call @[[SUM:layers_outlined[0-9]+]](%[[ARG1]], %[[ARG2]])
// CHECK-NEXT:    memref.dealloc %[[BUF]]
// CHECK-NEXT:    return
// CHECK:       func.func private @[[SUM]](
// CHECK-SAME:      attributes {fxmlir.noalias = array<i64: 1, 8>, llvm.linkage = #llvm.linkage<internal>, passthrough = ["noinline"]}
// CHECK:         %[[R:.*]] = scf.for {{.*}} iter_args
// CHECK:         memref.store %[[R]]
// CHECK-NEXT:    return
// CHECK:       func.func private @[[RELU]](
// CHECK-SAME:      %[[IN:[a-zA-Z0-9_]+]]: memref<4x8xf32>
// CHECK-SAME:      %[[OUT:[a-zA-Z0-9_]+]]: memref<4x8xf32>
// CHECK-SAME:      attributes {fxmlir.noalias = array<i64: 1, 8>, llvm.linkage = #llvm.linkage<internal>, passthrough = ["noinline"]}
// CHECK-DAG:     %[[C4:.*]] = arith.constant 4 : index
// CHECK-DAG:     %[[C8:.*]] = arith.constant 8 : index
// CHECK-DAG:     %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK:         scf.for %{{.*}} to %[[C4]]
// CHECK-NEXT:      scf.for %{{.*}} to %[[C8]]
// CHECK-NEXT:        memref.load %[[IN]]
// CHECK-NEXT:        arith.maximumf %{{.*}}, %[[ZERO]]
// CHECK-NEXT:        memref.store %{{.*}}, %[[OUT]]
// CHECK-NOT:   func.func
func.func @layers(%arg0: memref<4x8xf32>, %arg1: memref<4x8xf32>, %arg2: memref<4x8xf32>) attributes {llvm.emit_c_interface} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %cst = arith.constant 0.000000e+00 : f32
  %alloc = memref.alloc() {alignment = 64 : i64} : memref<4x8xf32>
  scf.for %i = %c0 to %c4 step %c1 {
    scf.for %j = %c0 to %c8 step %c1 {
      %0 = memref.load %arg0[%i, %j] : memref<4x8xf32>
      %1 = arith.maximumf %0, %cst : f32
      memref.store %1, %alloc[%i, %j] : memref<4x8xf32>
    }
  }
  scf.for %i = %c0 to %c4 step %c1 {
    scf.for %j = %c0 to %c8 step %c1 {
      %0 = memref.load %alloc[%i, %j] : memref<4x8xf32>
      %1 = arith.maximumf %0, %cst : f32
      memref.store %1, %arg1[%i, %j] : memref<4x8xf32>
    }
  }
  %sum = scf.for %i = %c0 to %c4 step %c1 iter_args(%acc = %cst) -> (f32) {
    %0 = memref.load %arg1[%i, %c0] : memref<4x8xf32>
    %1 = arith.addf %acc, %0 : f32
    scf.yield %1 : f32
  }
  memref.store %sum, %arg2[%c0, %c0] : memref<4x8xf32>
  memref.dealloc %alloc : memref<4x8xf32>
  return
}

// -----

// A value a kept op uses (here the offset of a view) stays in the graph function; the loop
// after it takes the view as an argument.
// CHECK-LABEL: func.func @view(
// CHECK:         %[[OFF:.*]] = arith.muli
// CHECK-NEXT:    %[[VIEW:.*]] = memref.subview %{{.*}}[%[[OFF]]] [4] [1]
// CHECK-NEXT:    call @[[FILL:view_outlined[0-9]+]](%[[VIEW]])
// CHECK-NEXT:    return
// CHECK:       func.func private @[[FILL]](%{{.*}}: memref<4xf32, strided<[1], offset: ?>>
// CHECK-SAME:      fxmlir.noalias = array<i64: 1>
// CHECK:         scf.for
// CHECK:           memref.store
func.func @view(%arg0: memref<16xf32>, %arg1: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %cst = arith.constant 1.000000e+00 : f32
  %offset = arith.muli %arg1, %c2 : index
  %view = memref.subview %arg0[%offset] [4] [1] : memref<16xf32> to memref<4xf32, strided<[1], offset: ?>>
  scf.for %i = %c0 to %c4 step %c1 {
    memref.store %cst, %view[%i] : memref<4xf32, strided<[1], offset: ?>>
  }
  return
}

// -----

// Two views of one allocation may overlap: neither is listed, while the input (a scalar index
// argument before it takes one position) and the allocation read through a cast are.
// CHECK-LABEL: func.func @overlap(
// CHECK:         call @[[SHIFT:overlap_outlined[0-9]+]](
// CHECK:       func.func private @[[SHIFT]](
// CHECK-SAME:      : memref<8xf32>{{.*}}: index{{.*}}: memref<4xf32, strided<[1]>>{{.*}}: memref<4xf32, strided<[1], offset: 4>>{{.*}}: memref<?xf32>
// CHECK-SAME:      fxmlir.noalias = array<i64: 1, 17>
func.func @overlap(%arg0: memref<8xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %alloc = memref.alloc() : memref<8xf32>
  %other = memref.alloc(%n) : memref<?xf32>
  %low = memref.subview %alloc[0] [4] [1] : memref<8xf32> to memref<4xf32, strided<[1]>>
  %high = memref.subview %alloc[4] [4] [1] : memref<8xf32> to memref<4xf32, strided<[1], offset: 4>>
  %cast = memref.cast %other : memref<?xf32> to memref<?xf32>
  scf.for %i = %c0 to %c4 step %c1 {
    %0 = memref.load %arg0[%i] : memref<8xf32>
    %1 = arith.addi %i, %n : index
    %2 = memref.load %low[%i] : memref<4xf32, strided<[1]>>
    %3 = arith.addf %0, %2 : f32
    memref.store %3, %high[%i] : memref<4xf32, strided<[1], offset: 4>>
    memref.store %3, %cast[%1] : memref<?xf32>
  }
  memref.dealloc %alloc : memref<8xf32>
  memref.dealloc %other : memref<?xf32>
  return
}

// -----

// Private functions (those outlined before, say) are left alone: the stage changes nothing the
// second time.
// CHECK-LABEL: func.func @again(
// CHECK-NEXT:    call @[[DONE:again_outlined0]](%{{.*}})
// CHECK-NEXT:    return
// CHECK:       func.func private @[[DONE]](
// CHECK-NEXT:    %[[C0:.*]] = arith.constant 0 : index
// CHECK:         scf.for
// CHECK-NOT:   call
// CHECK-NOT:   func.func
func.func @again(%arg0: memref<4xf32>) {
  call @again_outlined0(%arg0) : (memref<4xf32>) -> ()
  return
}
func.func private @again_outlined0(%arg0: memref<4xf32>) attributes {llvm.linkage = #llvm.linkage<internal>, passthrough = ["noinline"]} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %cst = arith.constant 1.000000e+00 : f32
  scf.for %i = %c0 to %c4 step %c1 {
    memref.store %cst, %arg0[%i] : memref<4xf32>
  }
  return
}

// -----

// A copy between strided buffers (a slice into a stack of slices) becomes a linalg.copy, which
// the loops stage makes a loop nest LLVM vectorises (memref.copy of a strided buffer would call
// the runtime's element-by-element memrefCopy); a copy between identity layouts stays (it
// lowers to memcpy).
// CHECK-LABEL: func.func @copies(
// CHECK:         call @[[STRIDED:.*]](%{{.*}}, %{{.*}}) : (memref<4x16xf32, strided<[32, 2]>>, memref<4x16xf32, strided<[64, 1], offset: 16>>) -> ()
// CHECK:         call @[[PLAIN:.*]](%{{.*}}, %{{.*}}) : (memref<8x8xf32>, memref<8x8xf32>) -> ()
// CHECK:       func.func private @[[PLAIN]](
// CHECK-NEXT:    memref.copy %{{.*}}, %{{.*}} : memref<8x8xf32> to memref<8x8xf32>
// CHECK:       func.func private @[[STRIDED]](
// CHECK-NEXT:    linalg.copy ins(%{{.*}} : memref<4x16xf32, strided<[32, 2]>>) outs(%{{.*}} : memref<4x16xf32, strided<[64, 1], offset: 16>>)
// CHECK-NOT:     memref.copy
func.func @copies(%src: memref<4x32xf32>, %dst: memref<4x64xf32>, %a: memref<8x8xf32>, %b: memref<8x8xf32>) {
  %s = memref.subview %src[0, 0] [4, 16] [1, 2] : memref<4x32xf32> to memref<4x16xf32, strided<[32, 2]>>
  %d = memref.subview %dst[0, 16] [4, 16] [1, 1] : memref<4x64xf32> to memref<4x16xf32, strided<[64, 1], offset: 16>>
  memref.copy %s, %d : memref<4x16xf32, strided<[32, 2]>> to memref<4x16xf32, strided<[64, 1], offset: 16>>
  memref.copy %a, %b : memref<8x8xf32> to memref<8x8xf32>
  return
}
