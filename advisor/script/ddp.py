"""DistributedDataParallel as a rank of a torchrun job uses it (inside the script's process): where the
script built it and with which options, how many forwards each optimizer step makes and how many of
them all-reduce (not under ``no_sync``), whether every parameter gets a gradient, and DDP's own
logging data (bucket sizes, communication time)."""

from __future__ import annotations

from typing import Any

NS_PER_MS = 1e6


class DDPWatcher:
    def __init__(self) -> None:
        self.models: list[tuple[Any, tuple[str, int] | None]] = []
        self.counting = False
        self.forwards = 0
        self.synced = 0
        self.steps = 0
        self.missing_grad_steps = 0
        self.forward_site: tuple[str, int] | None = None

    def install(self) -> None:
        import torch
        from torch.nn.parallel import DistributedDataParallel

        from advisor.sources import user_frame

        original = DistributedDataParallel.__init__
        watcher = self

        def init(ddp, *args, **kwargs):
            original(ddp, *args, **kwargs)
            watcher.models.append((ddp, user_frame(depth=2)))

            def forward(module, inputs):
                if watcher.forward_site is None:
                    watcher.forward_site = user_frame(depth=2)
                if watcher.counting:
                    watcher.forwards += 1
                    watcher.synced += bool(torch.is_grad_enabled() and module.require_backward_grad_sync)
            ddp.register_forward_pre_hook(forward)
        DistributedDataParallel.__init__ = init

    def reset(self) -> None:
        """The window restarted its count (forwards came first, then an optimizer step): count anew."""
        self.counting, self.forwards, self.synced, self.steps, self.missing_grad_steps = False, 0, 0, 0, 0

    def after_optimizer_step(self) -> None:
        if not self.counting or not self.models:
            return
        self.steps += 1
        ddp = self.models[0][0]
        if any(p.requires_grad and p.grad is None for p in ddp.parameters()):
            self.missing_grad_steps += 1

    def inner(self, module: Any) -> Any:
        """The model DDP wraps, for describing and capturing (DDP itself cannot be copied)."""
        return module.module if any(module is ddp for ddp, _ in self.models) else module

    def describe(self) -> dict | None:
        if not self.models:
            return None
        from advisor.evidence import DDPInfo

        ddp, site = self.models[0]
        logged = ddp._get_ddp_logging_data()
        steps = max(self.steps, 1)

        def ms(key: str) -> float | None:
            value = logged.get(key)
            return round(value / NS_PER_MS, 4) if isinstance(value, (int, float)) and value > 0 else None
        buckets = [int(b) for b in str(logged.get("bucket_sizes", "")).replace(" ", "").split(",") if b.isdigit()]
        info = DDPInfo(
            file=site[0] if site else "", line=site[1] if site else 0, world_size=int(logged.get("world_size", 1)),
            backend=str(logged.get("backend_name", "")), find_unused_parameters=bool(ddp.find_unused_parameters),
            unused_parameter_bytes=int(logged.get("unused_parameter_size", 0)), steps_watched=self.steps,
            steps_with_missing_grads=self.missing_grad_steps,
            parameter_bytes=int(logged.get("total_parameter_size_bytes", 0)),
            bucket_cap_bytes=int(logged.get("bucket_cap_bytes", 0)), bucket_bytes=buckets,
            gradient_as_bucket_view=bool(ddp.gradient_as_bucket_view),
            forward_file=self.forward_site[0] if self.forward_site else "",
            forward_line=self.forward_site[1] if self.forward_site else 0,
            forwards_per_step=round(self.forwards / steps, 3), synced_forwards_per_step=round(self.synced / steps, 3),
            backward_comm_ms=ms("avg_backward_comm_time"), backward_overlap_ms=ms("avg_backward_compute_comm_overlap_time"),
            backward_compute_ms=ms("avg_backward_compute_time"))
        return info.model_dump()
