// RUN: fxmlir-opt --load-pass-plugin %pass_plugin --pipeline fusion \
// RUN:     --add-stage 'after:fusion:count:passes=builtin.module(func.func(fxmlir-example-count-ops))' %s \
// RUN:   | FileCheck %s
// RUN: rm -rf %t && mkdir -p %t
// RUN: clang -shared -fPIC -o %t/libMLIR.so.21.1 -Wl,-soname,libMLIR.so.21.1 %S/Inputs/stand_in.c
// RUN: clang -shared -fPIC -o %t/old.so %S/Inputs/pass_plugin.c -Wl,--no-as-needed %t/libMLIR.so.21.1
// RUN: not fxmlir-opt --load-pass-plugin %t/old.so %s 2>&1 | FileCheck %s --check-prefix=OLD
// RUN: clang -shared -fPIC -o %t/alone.so %S/Inputs/pass_plugin.c
// RUN: not fxmlir-opt --load-pass-plugin %t/alone.so %s 2>&1 | FileCheck %s --check-prefix=ALONE
// RUN: clang -shared -fPIC -DAPI_VERSION=99 -o %t/v99.so %S/Inputs/pass_plugin.c \
// RUN:     -Wl,--no-as-needed -L%fxmlir_bin -lMLIR-C
// RUN: not fxmlir-opt --load-pass-plugin %t/v99.so %s 2>&1 | FileCheck %s --check-prefix=V99
// RUN: not fxmlir-opt --load-pass-plugin %t/missing.so %s 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not fxmlir-opt --load-pass-plugin %S/Inputs/pass_plugin.c %s 2>&1 | FileCheck %s --check-prefix=NOT-ELF

// A native pass plugin (C++ built with CMake against the same MLIR, examples/pass-plugin)
// loads into fxmlir-opt; a stage of one's own runs its pass. A plugin that would bring a
// second MLIR into the process (built against another version, or with none linked: its own
// copy), or that speaks another plugin API, is refused with a message before it runs.

// CHECK: func.func @scaled({{.*}}) -> tensor<4xf32> attributes {example.op_count = 3 : i64}

// OLD: error: native plugin {{.*}}old.so: it was built against libMLIR.so.21.1, but fxmlir runs libLLVM.so.22.1 and libMLIR.so.22.1: rebuild it against the same MLIR
// ALONE: error: native plugin {{.*}}alone.so: it links neither libMLIR.so nor libMLIR-C.so
// V99: error: native plugin {{.*}}v99.so: plugin API version 99, fxmlir's MLIR takes 1
// MISSING: error: I/O error on {{.*}}missing.so: No such file or directory
// NOT-ELF: error: native plugin {{.*}}pass_plugin.c: not an ELF64 little-endian shared object

func.func @scaled(%x: tensor<4xf32>) -> tensor<4xf32> {
  %t = math.tanh %x : tensor<4xf32>
  %s = arith.mulf %t, %t : tensor<4xf32>
  return %s : tensor<4xf32>
}
