// RUN: fxmlir-opt --target=skylake-avx512 --pipeline loops --split-input-file %s | FileCheck %s --enable-var-scope
// RUN: fxmlir-opt --target=x86-64-v3 --pipeline loops --split-input-file %s | FileCheck %s --check-prefix=AVX2

// The loops stage's hook (`pipeline::polynomials`): `math.exp` and `math.erf` of f32, on
// vectors and on scalars, become inline arithmetic, which LLVM interleaves instead of
// calling libmvec one vector at a time. The function asks LLVM for 512-bit vectors on an
// AVX-512 target (its cost model would keep 256), next to the attributes it had.

// exp: clamped, reduced by n·ln 2 (n rounded to even, ln 2 in two FMAs), a degree-6
// polynomial (six FMAs), scaled by 2^n built in two halves in the exponent field; a NaN
// input selected back.
// CHECK-LABEL: func.func @exp(
// CHECK-SAME:      %[[X:[a-zA-Z0-9_]+]]: vector<2x32xf32>
// CHECK-SAME:      passthrough = {{\["noinline", \["prefer-vector-width", "512"\]\]}}
// CHECK:         %[[LOW:.*]] = arith.minimumf %[[X]], %{{.*}} : vector<2x32xf32>
// CHECK:         %[[CLAMPED:.*]] = arith.maximumf %[[LOW]], %{{.*}} : vector<2x32xf32>
// CHECK:         %[[N:.*]] = math.roundeven %{{.*}} : vector<2x32xf32>
// CHECK-COUNT-8: math.fma
// CHECK:         %[[K:.*]] = arith.fptosi %[[N]] : vector<2x32xf32> to vector<2x32xi32>
// CHECK:         arith.shrsi %[[K]]
// CHECK-COUNT-2: arith.bitcast %{{.*}} : vector<2x32xi32> to vector<2x32xf32>
// CHECK:         %[[NAN:.*]] = arith.cmpf uno, %[[X]], %{{.*}} : vector<2x32xf32>
// CHECK:         %[[R:.*]] = arith.select %[[NAN]], %[[X]], %{{.*}} : vector<2x32xi1>, vector<2x32xf32>
// CHECK:         return %[[R]]
// CHECK-NOT:     math.exp
// CHECK-NOT:     _ZGV
// AVX2-LABEL: func.func @exp(
// AVX2-SAME:      passthrough = ["noinline"]}
// AVX2-NOT:      math.exp
func.func @exp(%x: vector<2x32xf32>) -> vector<2x32xf32> attributes {passthrough = ["noinline"]} {
  %0 = math.exp %x : vector<2x32xf32>
  return %0 : vector<2x32xf32>
}

// -----

// erf: x·P(x²) below 1 (seven coefficients), a degree-12 polynomial in |x| - 2.5 beyond,
// capped at 1, exactly 1 from 3.92, with the sign of x; on a scalar as on vectors.
// CHECK-LABEL: func.func @erf(
// CHECK-SAME:      %[[X:[a-zA-Z0-9_]+]]: f32
// CHECK-SAME:      passthrough = {{\[\["prefer-vector-width", "512"\]\]}}
// CHECK:         %[[SQUARE:.*]] = arith.mulf %[[X]], %[[X]] : f32
// CHECK-COUNT-6: math.fma
// CHECK:         %[[SMALL:.*]] = arith.mulf %[[X]], %{{.*}} : f32
// CHECK:         %[[ABS:.*]] = math.absf %[[X]] : f32
// CHECK-COUNT-12: math.fma
// CHECK:         arith.cmpf oge, %[[ABS]], %{{.*}} : f32
// CHECK:         %[[LARGE:.*]] = math.copysign %{{.*}}, %[[X]] : f32
// CHECK:         %[[BELOW:.*]] = arith.cmpf olt, %[[ABS]], %{{.*}} : f32
// CHECK:         %[[R:.*]] = arith.select %[[BELOW]], %[[SMALL]], %[[LARGE]] : f32
// CHECK:         return %[[R]]
// CHECK-NOT:     math.erf
func.func @erf(%x: f32) -> f32 {
  %0 = math.erf %x : f32
  return %0 : f32
}

// -----

// Left to libmvec and libm: f64, and functions with no inline form.
// CHECK-LABEL: func.func @left(
// CHECK-NOT:     passthrough
// CHECK:         call @_ZGVeN8v_exp(
// CHECK:         math.tanh %{{.*}} : f32
func.func @left(%x: vector<8xf64>, %y: f32) -> (vector<8xf64>, f32) {
  %0 = math.exp %x : vector<8xf64>
  %1 = math.tanh %y : f32
  return %0, %1 : vector<8xf64>, f32
}
