# -*- Python -*-
# lit configuration for the fxmlir FileCheck suite.
#
#   /work/main/.venv/bin/lit -v lit-tests
#
# RUN lines call the built tools by name: fxmlir-opt and fxmlir (from target/release, or
# $FXMLIR_BIN_DIR) and FileCheck, not, split-file, mlir-opt (from /usr/lib/llvm-22/bin, or
# $LLVM_BIN_DIR), and the C API examples and the example pass plugin (target/examples, from
# `make examples`). Nothing here builds anything: run `make build examples` first.

import os
import sys

import lit.formats

config.name = "fxmlir"
config.test_format = lit.formats.ShTest(execute_external=False)
# Graph-file tests are JSON chunks with `//` comment lines (RUN/CHECK); IR tests are .mlir.
config.suffixes = [".mlir", ".json", ".test"]
# Support files that are not tests.
config.excludes = ["Inputs", "lit.cfg.py"]

config.test_source_root = os.path.dirname(os.path.abspath(__file__))
config.test_exec_root = os.path.join(config.test_source_root, "Output")

repo_root = os.path.dirname(config.test_source_root)
fxmlir_bin = os.path.abspath(
    os.environ.get("FXMLIR_BIN_DIR") or os.path.join(repo_root, "target", "release")
)
llvm_bin = os.path.abspath(os.environ.get("LLVM_BIN_DIR") or "/usr/lib/llvm-22/bin")

missing = []
for tool in ("fxmlir", "fxmlir-opt"):
    path = os.path.join(fxmlir_bin, tool)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        missing.append(path)
if missing:
    lit_config.fatal(
        "fxmlir binaries not found: {}\n"
        "Build them with `cargo build --release` or point FXMLIR_BIN_DIR at a directory "
        "holding fxmlir and fxmlir-opt.".format(", ".join(missing))
    )
for tool in ("FileCheck", "not", "mlir-opt", "split-file"):
    path = os.path.join(llvm_bin, tool)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        lit_config.fatal(
            f"LLVM tool not found: {path}\nInstall LLVM 22 or set LLVM_BIN_DIR to a directory "
            "holding FileCheck, not, split-file and mlir-opt."
        )

examples = os.path.join(repo_root, "target", "examples")
for built in ("c-api/run_graph", "c-api/stages", "pass-plugin/FxmlirExamplePasses.so"):
    if not os.path.isfile(os.path.join(examples, built)):
        lit_config.fatal(
            f"{os.path.join(examples, built)} not found: build the C API examples and the "
            "example pass plugin with `make examples`."
        )

# Tools resolve by name through PATH: our binaries first, then LLVM's, then the system's
# (grep, cat, ls for the CLI tests).
config.environment["PATH"] = os.pathsep.join(
    [
        fxmlir_bin,
        os.path.join(examples, "c-api"),
        llvm_bin,
        config.environment.get("PATH", os.environ.get("PATH", "")),
    ]
)
# Deterministic, quiet tools: no dump directory, compile cache or log filter leaks in from the
# caller.
for var in ("FXMLIR_DUMP_DIR", "FXMLIR_CACHE_DIR", "FXMLIR_LOG", "RUST_LOG"):
    config.environment.pop(var, None)
config.environment["RUST_BACKTRACE"] = "0"

config.substitutions.append(("%fxmlir_bin", fxmlir_bin))
config.substitutions.append(("%llvm_bin", llvm_bin))
config.substitutions.append(
    ("%pass_plugin", os.path.join(examples, "pass-plugin", "FxmlirExamplePasses.so"))
)
config.substitutions.append(("%python", sys.executable))

# The IR a test checks never depends on the machine running it: a test that checks a CPU's
# lowering states it (`--target=skylake-avx512`), and every other compile is for a generic AVX2
# CPU, whose code runs on every host CI uses.
config.environment["FXMLIR_TARGET"] = "x86-64-v3"
# The host's features, for the RUN lines that execute code compiled for AVX-512 or AVX512-BF16
# (`%if avx512 %{ fxmlir run --target=x86-64-v4 ... %}`); the IR checks run everywhere.
try:
    with open("/proc/cpuinfo") as cpuinfo:
        flags = cpuinfo.read().split()
    if "avx512f" in flags:
        config.available_features.add("avx512")
    if "avx512_bf16" in flags:
        config.available_features.add("avx512bf16")
except OSError:
    pass
