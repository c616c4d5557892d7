"""torch.mv FP16 GEMV GB/s (cuBLAS) and device copy GB/s, for the shapes of gemv_bandwidth.

Bytes counted: weights (N*K*2) + x (K*2) + y (N*2). Copy: bytes read + written. Weight copies
are rotated (512 MiB in total, at most 16) so the 60 MB L2 does not serve repeated launches.
Timing: CUDA events around a loop of launches, after warm-up; median of 5 repeats.
"""
import os

import torch

dev = "cuda"
print("torch", torch.__version__, torch.cuda.get_device_name(0))


def bench(fn, iters):
    for _ in range(3):
        fn(0)
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for i in range(iters):
            fn(i)
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / 1e3 / iters)
    return sorted(times)[2]


n = 1 << 30
a = torch.empty(n, dtype=torch.uint8, device=dev).random_(0, 255)
b = torch.empty_like(a)
t = bench(lambda i: b.copy_(a), 20)
copy = 2 * n / t / 1e9
print(f"torch copy (read+write, 1024 MiB): {copy:.1f} GB/s")
del a, b

shapes = os.environ.get("TORCH_SHAPES", "4096x4096,14336x4096,4096x14336,49152x576")
for (N, K) in [tuple(int(v) for v in s.split("x")) for s in shapes.split(",")]:
    wb = N * K * 2
    copies = max(1, min(16, -(-(512 << 20) // wb)))
    ws = [torch.randn(N, K, dtype=torch.float16, device=dev) for _ in range(copies)]
    x = torch.randn(K, dtype=torch.float16, device=dev)
    ref = ws[0].float() @ x.float()
    got = torch.mv(ws[0], x).float()
    err = ((got - ref) ** 2).sum() / (ref ** 2).sum()
    t = bench(lambda i: torch.mv(ws[i % copies], x), 200)
    gbs = (wb + K * 2 + N * 2) / t / 1e9
    print(f"torch.mv fp16 {N}x{K}: {t*1e6:.1f} us, {gbs:.1f} GB/s ({100*gbs/copy:.0f}% of copy), nmse {err:.2e}")
    del ws
