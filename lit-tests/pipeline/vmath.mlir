// RUN: fxmlir-opt --target=skylake-avx512 --pipeline loops --split-input-file %s | FileCheck %s --enable-var-scope
// RUN: fxmlir-opt --target=skylake-avx512 --pipeline to-llvm --split-input-file %s | FileCheck %s --check-prefix=LLVM

// The loops stage's last step (`pipeline::vmath`): math on vectors calls libmvec's vector
// functions, the widest variant (AVX-512's here) whose lanes divide a row, slice by slice;
// each function is declared once. Without it, the llvm stage's libm conversion would make an
// 8 x 32 tile of a tanh GELU 256 scalar `tanhf` calls. (`f32` exp and erf are inline
// polynomials before this step: see polynomials.mlir.)

// A 2 x 32 tile: each row extracted, cut into two 16-lane slices, one call per slice, the
// results put back in place.
// CHECK-LABEL: func.func @tile(
// CHECK-SAME:      %[[X:[a-zA-Z0-9_]+]]: vector<2x32xf32>
// CHECK:         %[[R0:.*]] = vector.extract %[[X]][0] : vector<32xf32> from vector<2x32xf32>
// CHECK-NEXT:    %[[S0:.*]] = vector.extract_strided_slice %[[R0]] {offsets = [0], sizes = [16], strides = [1]}
// CHECK-NEXT:    %[[E0:.*]] = call @_ZGVeN16v_tanhf(%[[S0]]) : (vector<16xf32>) -> vector<16xf32>
// CHECK-NEXT:    %[[P0:.*]] = vector.insert_strided_slice %[[E0]], %[[R0]] {offsets = [0], strides = [1]}
// CHECK-NEXT:    %[[S1:.*]] = vector.extract_strided_slice %[[R0]] {offsets = [16], sizes = [16], strides = [1]}
// CHECK-NEXT:    %[[E1:.*]] = call @_ZGVeN16v_tanhf(%[[S1]])
// CHECK-NEXT:    %[[P1:.*]] = vector.insert_strided_slice %[[E1]], %[[P0]] {offsets = [16], strides = [1]}
// CHECK-NEXT:    %[[T0:.*]] = vector.insert %[[P1]], %[[X]] [0] : vector<32xf32> into vector<2x32xf32>
// CHECK-NEXT:    %[[R1:.*]] = vector.extract %[[X]][1]
// CHECK-COUNT-2: call @_ZGVeN16v_tanhf(
// CHECK:         %[[T1:.*]] = vector.insert %{{.*}}, %[[T0]] [1] : vector<32xf32> into vector<2x32xf32>
// CHECK-NEXT:    return %[[T1]] : vector<2x32xf32>
// CHECK-NOT:     math.tanh
// CHECK:       func.func private @_ZGVeN16v_tanhf(vector<16xf32>) -> vector<16xf32>
// CHECK-NOT:   func.func private @_ZGVeN16v_tanhf

// The declaration survives to LLVM as an external function of 512-bit vectors.
// LLVM-LABEL: llvm.func @tile(
// LLVM-COUNT-4: llvm.call @_ZGVeN16v_tanhf(%{{.*}}) : (vector<16xf32>) -> vector<16xf32>
// LLVM:       llvm.func @_ZGVeN16v_tanhf(vector<16xf32>) -> vector<16xf32>
func.func @tile(%x: vector<2x32xf32>) -> vector<2x32xf32> {
  %0 = math.tanh %x : vector<2x32xf32>
  return %0 : vector<2x32xf32>
}

// -----

// A row of exactly one variant's lanes is one call; `powf` is libm's `pow`, of two vectors;
// f64 rows take the 8-lane variants.
// CHECK-LABEL: func.func @row(
// CHECK-SAME:      %[[X:[a-zA-Z0-9_]+]]: vector<16xf32>
// CHECK-SAME:      %[[Y:[a-zA-Z0-9_]+]]: vector<8xf64>
// CHECK-NEXT:    %[[E:.*]] = call @_ZGVeN16v_logf(%[[X]]) : (vector<16xf32>) -> vector<16xf32>
// CHECK-NEXT:    %[[P:.*]] = call @_ZGVeN8vv_pow(%[[Y]], %[[Y]]) : (vector<8xf64>, vector<8xf64>) -> vector<8xf64>
// CHECK-NEXT:    return %[[E]], %[[P]]
// CHECK-DAG:   func.func private @_ZGVeN16v_logf(vector<16xf32>) -> vector<16xf32>
// CHECK-DAG:   func.func private @_ZGVeN8vv_pow(vector<8xf64>, vector<8xf64>) -> vector<8xf64>
func.func @row(%x: vector<16xf32>, %y: vector<8xf64>) -> (vector<16xf32>, vector<8xf64>) {
  %0 = math.log %x : vector<16xf32>
  %1 = math.powf %y, %y : vector<8xf64>
  return %0, %1 : vector<16xf32>, vector<8xf64>
}

// -----

// Left to the llvm stage: a row no variant divides (3 lanes), a function libmvec lacks
// (`sqrt` is an instruction), a scalar.
// CHECK-LABEL: func.func @left(
// CHECK-NEXT:    math.tanh %{{.*}} : vector<3xf32>
// CHECK-NEXT:    math.sqrt %{{.*}} : vector<16xf32>
// CHECK-NEXT:    math.tanh %{{.*}} : f32
// CHECK-NOT:   _ZGV
func.func @left(%x: vector<3xf32>, %y: vector<16xf32>, %s: f32) -> (vector<3xf32>, vector<16xf32>, f32) {
  %0 = math.tanh %x : vector<3xf32>
  %1 = math.sqrt %y : vector<16xf32>
  %2 = math.tanh %s : f32
  return %0, %1, %2 : vector<3xf32>, vector<16xf32>, f32
}
