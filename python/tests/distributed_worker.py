"""Two processes on loopback (gloo) train a small model for a few steps, uncompiled then
compiled with fxmlir, and compare the parameters step for step; rank 0 writes a JSON report.

    python distributed_worker.py ddp|fsdp2|functional REPORT.json PORT

DDP wraps the compiled model, with 1 MiB buckets (a layer each) whose gradients it all-reduces
as the compiled backward produces them; FSDP2 shards every layer (`fully_shard`), each layer
compiled, its parameters gathered around the compiled forward and backward.

``functional`` compiles, in strict mode, a function that uses every functional collective
fxmlir compiles in place (``torch.distributed._functional_collectives``) and a data-parallel
SGD step whose gradient is all-reduced inside the compiled function; each must be one kernel
that matches eager."""

import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

STEPS = 3
WIDTH = 512  # a 512 x 512 layer is 1 MiB: one DDP bucket each


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    layers = []
    for _ in range(3):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU()]
    return torch.nn.Sequential(*layers[:-1])


def _wrap(kind: str, model: torch.nn.Module) -> torch.nn.Module:
    if kind == "ddp":
        return torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def _train(kind: str, rank: int, compiled: bool) -> list[list[torch.Tensor]]:
    import fxmlir  # noqa: F401 - registers the backend

    model = _model()
    if compiled and kind == "ddp":
        # The model compiled inside DDP: DDP's hooks all-reduce each bucket's gradients as the
        # compiled backward produces them.
        model = torch.compile(model, backend="fxmlir")
    elif compiled:
        # Each layer compiled in place, then sharded: FSDP2's hooks gather the parameters
        # around each compiled forward and backward.
        for layer in model:
            layer.compile(backend="fxmlir")
    run = _wrap(kind, model)
    optimizer = torch.optim.SGD(run.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(rank)
    history = []
    for _ in range(STEPS):
        x = torch.randn(8, WIDTH, generator=generator)
        y = torch.randn(8, WIDTH, generator=generator)
        optimizer.zero_grad()
        ((run(x) - y) ** 2).mean().backward()
        optimizer.step()
        history.append(
            [
                p.detach().full_tensor() if hasattr(p, "full_tensor") else p.detach().clone()
                for p in run.parameters()
            ]
        )
    return history


def _collectives(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    import torch.distributed._functional_collectives as funcol

    world = dist.group.WORLD
    y = funcol.all_reduce(torch.relu(x @ w), "sum", world)
    gathered = funcol.all_gather_single(torch.tanh(y) * 2, 0, world)
    scattered = funcol.reduce_scatter_single(gathered * 3, "sum", 0, world)
    broadcast = funcol.broadcast(scattered + 1, 1, world)
    exchanged = funcol.all_to_all_single(broadcast.t().contiguous(), None, None, world)
    return exchanged - 1, funcol.all_reduce(broadcast, "max", world)


def _sgd_step(w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """One data-parallel SGD step of least squares: the local gradient, averaged over the
    ranks, in the compiled function."""
    import torch.distributed._functional_collectives as funcol

    gradient = 2 * x.t() @ (x @ w - y) / x.shape[0]
    return w - 0.05 * funcol.all_reduce(gradient, "avg", dist.group.WORLD)


def _functional(rank: int) -> dict:
    import fxmlir
    from fxmlir import backend, partition

    fxmlir.config.fallback = "error"
    generator = torch.Generator().manual_seed(rank)
    before, fallbacks = len(backend.history), len(partition.fallbacks)
    compiled = torch.compile(_collectives, backend="fxmlir", dynamic=False)
    worst = 0.0
    for _ in range(STEPS):
        x, w = torch.randn(8, 16, generator=generator), torch.randn(16, 16, generator=generator)
        for a, b in zip(compiled(x, w), _collectives(x, w), strict=True):
            worst = max(worst, (a - b).abs().max().item())
    kernels = len(backend.history) - before
    step = torch.compile(_sgd_step, backend="fxmlir", dynamic=False)
    w_eager = w_compiled = torch.zeros(16, 4)
    for _ in range(STEPS):
        x, y = torch.randn(32, 16, generator=generator), torch.randn(32, 4, generator=generator)
        w_eager, w_compiled = _sgd_step(w_eager, x, y), step(w_compiled, x, y)
        worst = max(worst, (w_eager - w_compiled).abs().max().item())
    return {
        "max_difference": worst,
        "kernels": len(backend.history) - before,
        "kernels_of_collectives": kernels,
        "fallbacks": len(partition.fallbacks) - fallbacks,
    }


def _compare_training(kind: str, rank: int) -> dict:
    from fxmlir import backend

    eager = _train(kind, rank, compiled=False)
    before = len(backend.history)
    compiled = _train(kind, rank, compiled=True)
    worst = max(
        (a - b).abs().max().item()
        for step_a, step_b in zip(eager, compiled, strict=True)
        for a, b in zip(step_a, step_b, strict=True)
    )
    return {"max_difference": worst, "kernels": len(backend.history) - before}


def _worker(rank: int, kind: str, report: str, port: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.set_num_threads(1)
    result = _functional(rank) if kind == "functional" else _compare_training(kind, rank)
    if rank == 0:
        with open(report, "w") as f:
            json.dump(result, f)
    # Both ranks done before either tears the group down: a rank that exits while the other
    # still has gloo work in flight aborts the other (seen under load).
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    kind, report, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    mp.spawn(_worker, args=(kind, report, port), nprocs=2)
