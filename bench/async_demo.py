"""Shows that mtia work is asynchronous: a 2048x2048 matmul, eager and through
torch.compile (`relu(a @ b) * 2 + 1`, Inductor's kernels as stream tasks),
returns to Python long before it has finished; the result is correct after
synchronize."""
import time

import torch


def measure(name, fn, reference, a, b):
    c = fn(a, b)  # warm-up (plans, allocation, compilation)
    torch.mtia.synchronize()
    t0 = time.perf_counter()
    c = fn(a, b)
    t_enqueue = time.perf_counter() - t0
    running = not torch.mtia.current_stream().query()
    torch.mtia.synchronize()
    t_total = time.perf_counter() - t0
    ok = torch.allclose(c.cpu(), reference(a.cpu(), b.cpu()), rtol=1e-4, atol=1e-3)
    print(f"{name} on mtia: returned after {t_enqueue * 1e3:.3f} ms, still running then: {running}; "
          f"finished after {t_total * 1e3:.1f} ms ({t_total / t_enqueue:.0f}x the enqueue time); "
          f"result correct after synchronize: {ok}")
    return ok and running and t_enqueue < t_total / 10


def main():
    a = torch.randn(2048, 2048, device="mtia")
    b = torch.randn(2048, 2048, device="mtia")

    def fused(a, b):
        return torch.relu(a @ b) * 2 + 1

    ok = measure("matmul 2048x2048", lambda a, b: a @ b, lambda a, b: a @ b, a, b)
    ok &= measure("torch.compile(relu(a @ b) * 2 + 1), 2048x2048", torch.compile(fused), fused, a, b)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
