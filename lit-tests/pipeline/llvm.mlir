// RUN: fxmlir-opt --pipeline llvm --split-input-file %s \
// RUN:   | FileCheck %s --enable-var-scope \
// RUN:       --implicit-check-not='{{[^a-z_.](arith|cf|math|memref|scf|func|linalg|tensor|bufferization|builtin)\.}}'

// The llvm stage on loop-level code: only the LLVM dialect remains (every other dialect's op is
// rejected by the implicit check above). Each function gets a C-interface wrapper
// (_mlir_ciface_<name>) taking memref descriptors by pointer.

// Loops become llvm.br/llvm.cond_br; arith.maximumf becomes llvm.intr.maximum (not a compare
// and select, which LLVM could not vectorise as a reduction).
// CHECK-LABEL: llvm.func @chain(
// CHECK-SAME:      %{{[a-zA-Z0-9_]+}}: !llvm.ptr
// CHECK-SAME:      attributes {llvm.emit_c_interface}
// CHECK:         llvm.br ^[[HEAD:bb[0-9]+]]
// CHECK:       ^[[HEAD]](%[[I:[0-9]+]]: i64
// CHECK:         llvm.icmp "slt" %[[I]], %{{.*}} : i64
// CHECK:         llvm.cond_br
// CHECK:         %[[X:.*]] = llvm.load %{{.*}} : !llvm.ptr -> f32
// CHECK:         %[[Y:.*]] = llvm.load %{{.*}} : !llvm.ptr -> f32
// CHECK:         %[[S:.*]] = llvm.fadd %[[X]], %[[Y]] : f32
// CHECK:         %[[M:.*]] = llvm.intr.maximum(%[[S]], %{{.*}}) : (f32, f32) -> f32
// CHECK:         %[[P:.*]] = llvm.fmul %[[M]], %{{.*}} : f32
// CHECK:         llvm.store %[[P]], %{{.*}} : f32, !llvm.ptr
// CHECK:         llvm.return
// CHECK-LABEL: llvm.func @_mlir_ciface_chain(
// CHECK-SAME:      %[[D0:[a-zA-Z0-9_]+]]: !llvm.ptr
// CHECK-SAME:      %[[D1:[a-zA-Z0-9_]+]]: !llvm.ptr
// CHECK-SAME:      %[[D2:[a-zA-Z0-9_]+]]: !llvm.ptr
// CHECK:         llvm.load %[[D0]] : !llvm.ptr -> !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)>
// CHECK:         llvm.load %[[D1]] : !llvm.ptr -> !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
// CHECK:         llvm.load %[[D2]] : !llvm.ptr -> !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)>
// CHECK:         llvm.call @chain(
// CHECK:         llvm.return
func.func @chain(%arg0: memref<4x8xf32>, %arg1: memref<8xf32>, %arg2: memref<4x8xf32>) attributes {llvm.emit_c_interface} {
  %cst = arith.constant 2.000000e+00 : f32
  %cst_0 = arith.constant 0.000000e+00 : f32
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  cf.br ^bb1(%c0 : index)
^bb1(%0: index):
  %1 = arith.cmpi slt, %0, %c4 : index
  cf.cond_br %1, ^bb2(%c0 : index), ^bb5
^bb2(%2: index):
  %3 = arith.cmpi slt, %2, %c8 : index
  cf.cond_br %3, ^bb3, ^bb4
^bb3:
  %4 = memref.load %arg0[%0, %2] : memref<4x8xf32>
  %5 = memref.load %arg1[%2] : memref<8xf32>
  %6 = arith.addf %4, %5 : f32
  %7 = arith.maximumf %6, %cst_0 : f32
  %8 = arith.mulf %7, %cst : f32
  memref.store %8, %arg2[%0, %2] : memref<4x8xf32>
  %9 = arith.addi %2, %c1 : index
  cf.br ^bb2(%9 : index)
^bb4:
  %10 = arith.addi %0, %c1 : index
  cf.br ^bb1(%10 : index)
^bb5:
  return
}

// -----

// Math: erf goes to libm (erff), tanh to an LLVM intrinsic, integer powers to a generated
// __mlir_math_ipowi_i64 helper (convert-math-to-funcs).
// CHECK-DAG:   llvm.func @erff(f32) -> f32
// CHECK-LABEL: llvm.func @math_ops(
// CHECK:         %[[E:.*]] = llvm.call @erff(%{{.*}}) : (f32) -> f32
// CHECK:         %[[T:.*]] = llvm.intr.tanh(%[[E]]) : (f32) -> f32
// CHECK:         llvm.store %[[T]]
// CHECK:         %[[P:.*]] = llvm.call @__mlir_math_ipowi_i64(%{{.*}}, %{{.*}}) : (i64, i64) -> i64
// CHECK:         llvm.store %[[P]]
// CHECK-LABEL: llvm.func @_mlir_ciface_math_ops(
// CHECK:       llvm.func linkonce_odr @__mlir_math_ipowi_i64(
// CHECK-SAME:      i64
// CHECK-SAME:      -> i64
func.func @math_ops(%arg0: memref<4xf32>, %arg1: memref<4xi64>, %arg2: memref<4xf32>, %arg3: memref<4xi64>) attributes {llvm.emit_c_interface} {
  %c3_i64 = arith.constant 3 : i64
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c1 = arith.constant 1 : index
  cf.br ^bb1(%c0 : index)
^bb1(%0: index):
  %1 = arith.cmpi slt, %0, %c4 : index
  cf.cond_br %1, ^bb2, ^bb3(%c0 : index)
^bb2:
  %2 = memref.load %arg0[%0] : memref<4xf32>
  %3 = math.erf %2 : f32
  %4 = math.tanh %3 : f32
  memref.store %4, %arg2[%0] : memref<4xf32>
  %5 = arith.addi %0, %c1 : index
  cf.br ^bb1(%5 : index)
^bb3(%6: index):
  %7 = arith.cmpi slt, %6, %c4 : index
  cf.cond_br %7, ^bb4, ^bb5
^bb4:
  %8 = memref.load %arg1[%6] : memref<4xi64>
  %9 = math.ipowi %8, %c3_i64 : i64
  memref.store %9, %arg3[%6] : memref<4xi64>
  %10 = arith.addi %6, %c1 : index
  cf.br ^bb3(%10 : index)
^bb5:
  return
}

// -----

// Intermediate buffers: memref.alloc becomes an aligned malloc, memref.dealloc a free.
// CHECK-DAG:   llvm.func @malloc(i64) -> !llvm.ptr
// CHECK-DAG:   llvm.func @free(!llvm.ptr)
// CHECK-LABEL: llvm.func @scratch(
// CHECK:         llvm.call @malloc(%{{.*}}) : (i64) -> !llvm.ptr
// CHECK:         llvm.store
// CHECK:         llvm.load
// CHECK:         llvm.call @free(%{{.*}}) : (!llvm.ptr) -> ()
// CHECK:         llvm.return
// CHECK-LABEL: llvm.func @_mlir_ciface_scratch(
func.func @scratch(%arg0: memref<4xf32>, %arg1: memref<4xf32>) attributes {llvm.emit_c_interface} {
  %c0 = arith.constant 0 : index
  %alloc = memref.alloc() {alignment = 64 : i64} : memref<4xf32>
  %0 = memref.load %arg0[%c0] : memref<4xf32>
  memref.store %0, %alloc[%c0] : memref<4xf32>
  %1 = memref.load %alloc[%c0] : memref<4xf32>
  memref.store %1, %arg1[%c0] : memref<4xf32>
  memref.dealloc %alloc : memref<4xf32>
  return
}

// -----

// A parallel region captures the descriptor fields it reads, not whole descriptors: a field
// read of a descriptor built from the function's arguments becomes that argument (the data
// pointers here), and the descriptor, now unused, is erased. OpenMP's translation then passes
// two pointers to the region instead of storing two descriptors field by field. The two data
// pointers are `noalias` (fxmlir.noalias, as the outline stage records it); inside the region
// each access through one of them carries its scope and, as not aliasing, the other's, which
// survives OpenMP's outlining of the region.
// CHECK:       #[[$DOMAIN:.*]] = #llvm.alias_scope_domain<id = distinct[{{[0-9]+}}]<>, description = "fxmlir">
// CHECK:       #[[$S0:alias_scope[0-9]*]] = #llvm.alias_scope<id = distinct[{{[0-9]+}}]<>, domain = #[[$DOMAIN]]>
// CHECK:       #[[$S1:alias_scope[0-9]*]] = #llvm.alias_scope<id = distinct[{{[0-9]+}}]<>, domain = #[[$DOMAIN]]>
// CHECK-LABEL: llvm.func @chunks(
// CHECK-SAME:      %{{arg[0-9]+}}: !llvm.ptr{{[^,]*}}, %[[IN:arg[0-9]+]]: !llvm.ptr {llvm.noalias}
// CHECK-SAME:      %{{arg[0-9]+}}: !llvm.ptr{{[^,]*}}, %[[OUT:arg[0-9]+]]: !llvm.ptr {llvm.noalias}
// CHECK-NOT:     llvm.insertvalue
// CHECK:         omp.parallel {
// CHECK-NOT:     llvm.extractvalue
// CHECK:         %[[P:[0-9]+]] = llvm.getelementptr inbounds|nuw %[[IN]][
// CHECK:         llvm.load %[[P]] {alias_scopes = [#[[$S0]]], noalias_scopes = [#[[$S1]]]}
// CHECK:         %[[Q:[0-9]+]] = llvm.getelementptr inbounds|nuw %[[OUT]][
// CHECK:         llvm.store %{{[0-9]+}}, %[[Q]] {alias_scopes = [#[[$S1]]], noalias_scopes = [#[[$S0]]]}
// CHECK:         omp.terminator
func.func @chunks(%arg0: memref<2x64xf32>, %arg1: memref<2x64xf32>) attributes {fxmlir.noalias = array<i64: 1, 8>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c5 = arith.constant 5 : index
  omp.parallel {
    omp.wsloop {
      omp.loop_nest (%i) : index = (%c0) to (%c2) step (%c1) {
        %x = memref.load %arg0[%i, %c5] : memref<2x64xf32>
        memref.store %x, %arg1[%i, %c0] : memref<2x64xf32>
        omp.yield
      }
    }
    omp.terminator
  }
  return
}

// -----

// A descriptor that no insertvalue chain names (a call's result): its field read moves out of
// the region, which captures the field.
// CHECK-LABEL: llvm.func @from_call(
// CHECK:         %[[D:[0-9]+]] = llvm.call @make()
// CHECK:         %[[P:[0-9]+]] = llvm.extractvalue %[[D]][1]
// CHECK:         omp.parallel {
// CHECK-NOT:     llvm.extractvalue
// CHECK:         llvm.getelementptr inbounds|nuw %[[P]][
// CHECK:         omp.terminator
func.func private @make() -> memref<4xf32>
func.func @from_call(%arg0: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %m = call @make() : () -> memref<4xf32>
  omp.parallel {
    omp.wsloop {
      omp.loop_nest (%i) : index = (%c0) to (%c4) step (%c1) {
        %x = memref.load %m[%i] : memref<4xf32>
        memref.store %x, %arg0[%i] : memref<4xf32>
        omp.yield
      }
    }
    omp.terminator
  }
  return
}
