// RUN: not fxmlir-opt --pipeline no-such-pipeline %s 2>&1 | FileCheck %s --check-prefix=NAMED
// RUN: not fxmlir-opt --pass-pipeline='builtin.module(no-such-pass)' %s 2>&1 | FileCheck %s --check-prefix=UNKNOWN-PASS
// RUN: not fxmlir-opt --pass-pipeline='builtin.module(canonicalize' %s 2>&1 | FileCheck %s --check-prefix=UNBALANCED
// RUN: rm -rf %t && mkdir -p %t
// RUN: env TMPDIR=%t not fxmlir-opt --pipeline default %s 2>&1 | FileCheck %s --check-prefix=STAGE
// RUN: not mlir-opt --irdl-file %t/fxmlir-repro/*.irdl.mlir --pass-pipeline='builtin.module(eliminate-empty-tensors,one-shot-bufferize{bufferize-function-boundaries=1 function-boundary-type-conversion=identity-layout-map},canonicalize,cse,buffer-deallocation-pipeline,canonicalize)' \
// RUN:   %t/fxmlir-repro/*.bufferize.repro.mlir 2>&1 | FileCheck %s --check-prefix=REPRO
// RUN: echo 'func.func @f(' | not fxmlir-opt --pipeline fusion 2>&1 | FileCheck %s --check-prefix=PARSE

// Pipeline errors: an unknown named pipeline lists the known ones; a bad textual pipeline is
// reported with MLIR's parser message; a failing stage names the stage, carries the diagnostics
// with their locations, and writes its input as a reproducer that stock mlir-opt replays.

// NAMED: fxmlir-opt: error: invalid pass pipeline `no-such-pipeline`: no such named pipeline; known: default, expand, fusion, schedule, parallel, bufferize, loops, outline, llvm, to-llvm

// UNKNOWN-PASS: fxmlir-opt: error: invalid pass pipeline `builtin.module(no-such-pass)`: failed to parse pass pipeline:
// UNKNOWN-PASS: 'no-such-pass' does not refer to a registered pass or pass pipeline

// UNBALANCED: fxmlir-opt: error: invalid pass pipeline `builtin.module(canonicalize`: failed to parse pass pipeline:

// PARSE: fxmlir-opt: error: cannot parse the input:

// math.absf on a tensor has no bufferization: the bufferize stage fails.
// STAGE: fxmlir-opt: error: pipeline stage `bufferize` failed:
// REPRO: error: op was not bufferized
func.func @unbufferizable(%arg0: memref<4xf32>, %arg1: memref<4xf32>) {
  %0 = bufferization.to_tensor %arg0 restrict : memref<4xf32> to tensor<4xf32>
  // STAGE-NEXT: loc("-":[[@LINE+1]]:8): op was not bufferized
  %1 = math.absf %0 : tensor<4xf32>
  bufferization.materialize_in_destination %1 in restrict writable %arg1 : (tensor<4xf32>, memref<4xf32>) -> ()
  return
}

// STAGE: reproduce with:
// STAGE-NEXT: mlir-opt --irdl-file={{.*}}fxmlir-repro{{.*}}.irdl.mlir --pass-pipeline='builtin.module(one-shot-bufferize{{.*}})' {{.*}}fxmlir-repro{{.*}}.bufferize.repro.mlir
