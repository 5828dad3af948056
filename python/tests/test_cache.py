"""The compile cache: a second process loads the first one's kernel from disk and computes the
same results; processes writing one key at once leave one good entry; an entry for another
target is not loaded; a full disk is reported and the compile goes on; a damaged entry is
reported, recompiled and overwritten; an empty
``FXMLIR_CACHE_DIR`` turns the disk cache off; the pipeline is part of the key; dumping
compiles (and stores) even when the kernel is cached; an unwritable directory is reported once.
Results are checked against eager with atol = rtol = 1e-4."""

import hashlib
import json
import logging
import os
import pathlib
import shutil
import subprocess
import sys

import fxmlir
import pytest
import torch
from fxmlir import backend
from records import latest, since

TOL = 1e-4

# One process: compile a small MLP with fixed weights and input, save the result and print the
# compile records and the largest error against eager.
PROCESS = """
import json, sys
import torch
import fxmlir
from fxmlir import backend

torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.LayerNorm(64), torch.nn.Linear(64, 16)
).eval()
x = torch.randn(8, 32)
with torch.no_grad():
    got = torch.compile(model, backend="fxmlir")(x)
    expected = model(x)
torch.save(got, sys.argv[1])
records = [
    {"source": r.source, "cached": r.cached, "stages": [s for s, _ in r.timings]}
    for r in backend.history
]
print(json.dumps({"records": records, "error": (got - expected).abs().max().item()}))
"""


def run_process(
    cache_dir: str, out: pathlib.Path, before: str = "", **env: str
) -> tuple[dict, str]:
    """Runs PROCESS (after the code ``before``) in a process of its own."""
    environment = {**os.environ, "FXMLIR_CACHE_DIR": cache_dir, **env}
    environment.pop("FXMLIR_DUMP_DIR", None)
    done = subprocess.run(
        [sys.executable, "-c", before + PROCESS, str(out)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["error"] <= TOL, report
    return report, done.stderr


def entries(cache_dir: pathlib.Path) -> list[pathlib.Path]:
    return sorted((cache_dir / "kernels").glob("*.kernel"))


@pytest.fixture(scope="module")
def filled_cache(tmp_path_factory) -> tuple[pathlib.Path, torch.Tensor]:
    """A cache directory one process filled, and that process's result."""
    root = tmp_path_factory.mktemp("filled")
    report, _ = run_process(str(root / "cache"), root / "cold.pt")
    assert [r["source"] for r in report["records"]] == ["compiled"]
    assert "cache-store" in report["records"][0]["stages"]
    assert len(entries(root / "cache")) == 1
    return root / "cache", torch.load(root / "cold.pt")


def test_second_process_loads_from_disk(filled_cache, tmp_path):
    cache_dir, cold = filled_cache
    shutil.copytree(cache_dir, tmp_path / "cache")
    report, stderr = run_process(str(tmp_path / "cache"), tmp_path / "warm.pt")
    (record,) = report["records"]
    assert record["source"] == "disk" and record["cached"], report
    assert record["stages"] == ["cache-load", "total"]
    assert "compile cache" not in stderr
    # The same machine code: bit for bit the cold process's result.
    assert torch.equal(torch.load(tmp_path / "warm.pt"), cold)


def test_processes_writing_one_key_at_once_leave_one_good_entry(tmp_path):
    """Three processes compile the same graph into an empty cache at once (each writes the
    entry through a file of its own, renamed into place): all succeed with one result, one
    entry remains, and a fourth process loads it."""
    environment = {**os.environ, "FXMLIR_CACHE_DIR": str(tmp_path / "cache")}
    environment.pop("FXMLIR_DUMP_DIR", None)
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", PROCESS, str(tmp_path / f"racer{k}.pt")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment,
        )
        for k in range(3)
    ]
    for run in runs:
        _, stderr = run.communicate(timeout=600)
        assert run.returncode == 0, stderr
    results = [torch.load(tmp_path / f"racer{k}.pt") for k in range(3)]
    assert all(torch.equal(r, results[0]) for r in results)
    assert len(entries(tmp_path / "cache")) == 1
    report, _ = run_process(str(tmp_path / "cache"), tmp_path / "after.pt")
    assert [r["source"] for r in report["records"]] == ["disk"], report
    assert torch.equal(torch.load(tmp_path / "after.pt"), results[0])


# A process whose files may hold at most 4 KiB (RLIMIT_FSIZE, its signal ignored): every write
# past that fails with EFBIG, as on a full disk. The result file is smaller; a kernel entry is
# not.
FULL_DISK = """
import resource, signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
"""


def test_a_full_disk_is_reported_and_the_compile_goes_on(tmp_path):
    report, stderr = run_process(str(tmp_path / "cache"), tmp_path / "full.pt", FULL_DISK)
    assert [r["source"] for r in report["records"]] == ["compiled"], report
    assert "cannot write the compile cache" in stderr, stderr
    # Nothing half-written is left to load.
    assert entries(tmp_path / "cache") == []
    assert not list((tmp_path / "cache").rglob("*.tmp"))


def test_an_entry_for_another_target_is_not_loaded(filled_cache, tmp_path):
    """The target is part of the key: a process compiling for another CPU compiles its own
    kernel beside the entry, and never loads code built for the host."""
    cache_dir, _ = filled_cache
    shutil.copytree(cache_dir, tmp_path / "cache")
    report, _ = run_process(str(tmp_path / "cache"), tmp_path / "v2.pt", FXMLIR_TARGET="x86-64-v2")
    assert [r["source"] for r in report["records"]] == ["compiled"], report
    assert len(entries(tmp_path / "cache")) == 2


def damaged(entry: bytes, damage: str) -> bytes:
    header, _, obj = entry.partition(b"\n\n")
    if damage == "flipped byte":
        return entry[:-100] + bytes([entry[-100] ^ 0xFF]) + entry[-99:]
    if damage == "cut short":
        return entry[: len(entry) // 2]
    if damage == "not an entry":
        return b"\x7fELF garbage"
    # A well-formed entry whose object is cut short: the JIT must reject it, not crash.
    key = header[: header.rindex(b"\nobject ") + 1]
    obj = obj[: len(obj) // 2]
    checksum = hashlib.sha256(obj).hexdigest().encode()
    return key + b"object %d %s\n\n" % (len(obj), checksum) + obj


@pytest.mark.parametrize("damage", ["flipped byte", "cut short", "not an entry", "bad object"])
def test_damaged_entry_is_recompiled_and_overwritten(filled_cache, tmp_path, damage):
    cache_dir, cold = filled_cache
    shutil.copytree(cache_dir, tmp_path / "cache")
    (entry,) = entries(tmp_path / "cache")
    good = entry.read_bytes()
    entry.write_bytes(damaged(good, damage))

    report, stderr = run_process(str(tmp_path / "cache"), tmp_path / "again.pt")
    assert [r["source"] for r in report["records"]] == ["compiled"], report
    assert f"ignoring the compile cache entry {entry}" in stderr
    assert torch.equal(torch.load(tmp_path / "again.pt"), cold)
    # Overwritten: code generation is deterministic, so the entry is the good one again.
    assert entries(tmp_path / "cache") == [entry]
    assert entry.read_bytes() == good


def test_empty_cache_dir_turns_the_disk_cache_off(tmp_path):
    home = tmp_path / "xdg"
    report, _ = run_process("", tmp_path / "out.pt", XDG_CACHE_HOME=str(home))
    (record,) = report["records"]
    assert record["source"] == "compiled" and "cache-store" not in record["stages"]
    assert not home.exists()


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("FXMLIR_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    config = type(fxmlir.config)
    assert config().cache_dir == str(tmp_path / "fxmlir")
    monkeypatch.setenv("FXMLIR_CACHE_DIR", "")
    assert config().cache_dir is None


def compile_records(fn, *args, **config) -> list[backend.CompileRecord]:
    torch._dynamo.reset()
    start = latest()
    with fxmlir.config.patch(**config):
        got = torch.compile(fn, backend="fxmlir")(*args)
    torch.testing.assert_close(got, fn(*args), atol=TOL, rtol=TOL)
    return since(start)


def test_pipeline_is_part_of_the_key(tmp_path):
    def fn(x):
        return torch.sigmoid(x) * 3.0 - 0.25

    x = torch.randn(5, 7)
    default = compile_records(fn, x, cache_dir=str(tmp_path), pipeline="default")
    to_llvm = compile_records(fn, x, cache_dir=str(tmp_path), pipeline="to-llvm")
    # Neither the in-process nor the disk cache takes one pipeline's kernel for the other.
    assert [r.source for r in default + to_llvm] == ["compiled", "compiled"]
    assert len(entries(tmp_path)) == 2
    again = compile_records(fn, x, cache_dir=str(tmp_path), pipeline="to-llvm")
    assert [r.source for r in again] == ["memory"]


def test_dumping_compiles_and_stores(tmp_path):
    def fn(x):
        return torch.cos(x) * 0.75 + 2.0

    x = torch.randn(6, 3)
    cache_dir = str(tmp_path / "cache")
    first = compile_records(fn, x, cache_dir=cache_dir)
    dumped = compile_records(fn, x, cache_dir=cache_dir, dump_dir=str(tmp_path / "dumps"))
    assert [r.source for r in first + dumped] == ["compiled", "compiled"]
    assert dumped[0].dumped and "cache-store" in dict(dumped[0].timings)
    assert len(entries(tmp_path / "cache")) == 1


def test_unwritable_cache_dir_is_reported_once(tmp_path, caplog):
    blocker = tmp_path / "a file"
    blocker.write_text("not a directory")
    caplog.set_level(logging.WARNING, logger="fxmlir")
    first = compile_records(lambda x: torch.exp(x) - 1.5, torch.randn(4), cache_dir=str(blocker))
    second = compile_records(lambda x: torch.log1p(x.abs()), torch.randn(4), cache_dir=str(blocker))
    assert [r.source for r in first + second] == ["compiled", "compiled"]
    warnings = [r.message for r in caplog.records if "cannot write the compile cache" in r.message]
    assert len(warnings) == 1, caplog.text
    assert str(blocker) in warnings[0]
    # Logged under the graph's name, and kept in its compile record.
    assert warnings[0].startswith(f"{first[0].name}: "), warnings[0]
    assert [w for w in first[0].warnings if "cannot write the compile cache" in w] == [
        warnings[0].removeprefix(f"{first[0].name}: ")
    ]
    assert second[0].warnings == ()
