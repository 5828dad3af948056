"""Two processes on loopback (gloo) train a small model for a few steps, uncompiled then
compiled with fxmlir, and compare the parameters step for step; rank 0 writes a JSON report.

    python distributed_worker.py ddp|fsdp2 REPORT.json PORT

DDP wraps the compiled model, with 1 MiB buckets (a layer each) whose gradients it all-reduces
as the compiled backward produces them; FSDP2 shards every layer (`fully_shard`), each layer
compiled, its parameters gathered around the compiled forward and backward."""

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


def _worker(rank: int, kind: str, report: str, port: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.set_num_threads(1)
    from fxmlir import backend

    eager = _train(kind, rank, compiled=False)
    before = len(backend.history)
    compiled = _train(kind, rank, compiled=True)
    worst = max(
        (a - b).abs().max().item()
        for step_a, step_b in zip(eager, compiled, strict=True)
        for a, b in zip(step_a, step_b, strict=True)
    )
    if rank == 0:
        with open(report, "w") as f:
            json.dump({"max_difference": worst, "kernels": len(backend.history) - before}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    kind, report, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    mp.spawn(_worker, args=(kind, report, port), nprocs=2)
