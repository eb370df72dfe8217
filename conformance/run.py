"""Conformance: PyTorch's own OpInfo database (op_db) on mtia against CPU.

    python conformance/run.py                 # full run: every sample of every op
    python conformance/run.py --quick         # CI slice: 2 samples per op and check
                                              # (all samples for ops with known failures)
    python conformance/run.py --ops add,mm    # some ops only
    python conformance/run.py --compiled      # torch.compile mode (below)

For every op and dtype (float32, float64, bfloat16, float16, complex64,
complex128, int8, int16, int32, int64, uint8, bool) the checks are: forward
values, gradients (every dtype CPU computes gradients in), out= variants, and
non-contiguous inputs. Ops that OpInfo's CPU comparison skips for being slow
or for CUDA's differences from CPU (COMPARE_DESPITE_SKIP: conv3d, the LU
family, the special polynomials, ...) are compared on their small samples:
mtia runs CPU's kernels, so it must agree with CPU there too. Each sample is run on CPU
and on mtia from the same seed (torch.manual_seed seeds both generators) and
compared with OpInfo's tolerances. Outcomes per sample: pass, fail (values
differ), more_accurate (bf16/fp16 values that differ from CPU's beyond the
tolerance but are closer to the float64 result than CPU's: where CPU's kernel
rounds partial sums to the dtype, e.g. col2im in conv_transpose or addbmm's
per-batch sums, and mtia computes in float32 with one rounding, see
csrc/aten/low_precision/low_precision.h; the standard PyTorch holds CUDA to), error (mtia raised
where CPU did not), not_implemented (mtia lacks the op), skipped (OpInfo's own
skip or xfail for test_compare_cpu). The pass rate counts pass and
more_accurate. Random ops
(RANDOM_OPS) are checked differently: CPU's shapes and dtypes, and the same
values from the same seed on mtia.

Compiled mode (--compiled) runs each sample through torch.compile (Inductor,
a fresh compile per sample) on mtia and compares it with eager CPU, forward
and gradients, float32 and bfloat16. A sample counts only where CPU Inductor
itself compiles it correctly (same comparison): others are `cpu_compile_fails`
(CPU raised or differs) and not executed on mtia. Random ops are left out (the
compiled RNG differs from eager's by design). Known failures of this mode are
in known_failures_compiled.json.

Ops run in worker processes: a crash loses that op (recorded as a crash), not
the run. Writes conformance/results/results.json (per op) and summary.md, and
compares the failing (op, check, dtype) triples with known_failures.json: a
new failure or a fixed known one makes the run exit non-zero.
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import time
import traceback
import unittest
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
DTYPES = ["float32", "float64", "bfloat16", "float16", "complex64", "complex128", "int8", "int16", "int32", "int64",
          "uint8", "bool"]
CHECKS = ["forward", "backward", "out", "noncontiguous"]
OUTCOMES = ["pass", "more_accurate", "fail", "error", "not_implemented", "skipped", "cpu_compile_fails"]
PASSING = {"pass", "more_accurate"}
NOT_EXECUTED = {"skipped", "cpu_compile_fails"}
COMPILED_DTYPES = ["float32", "bfloat16"]
COMPILED_CHECKS = ["forward", "backward"]
GRAD_DTYPES = {"float32", "float64", "bfloat16", "float16", "complex64", "complex128"}  # where CPU has them
# Deterministic ops whose CPU comparison OpInfo skips (slow: conv3d, embedding,
# polygamma; or xfails because CUDA differs from CPU: the LU family, batch
# norm, the special polynomials): compared here on samples of at most
# SMALL_SAMPLE elements.
COMPARE_DESPITE_SKIP = {"nn.functional.conv3d", "nn.functional.embedding", "polygamma.polygamma_n_1",
                        "polygamma.polygamma_n_2", "polygamma.polygamma_n_3", "polygamma.polygamma_n_4",
                        "round.decimals_3", "round.decimals_neg_3", "linalg.lu", "linalg.lu_factor",
                        "linalg.lu_factor_ex", "native_batch_norm", "_native_batch_norm_legit",
                        "as_strided.partial_views", "special.chebyshev_polynomial_t", "special.chebyshev_polynomial_u",
                        "special.chebyshev_polynomial_v", "special.chebyshev_polynomial_w",
                        "special.hermite_polynomial_h", "special.hermite_polynomial_he",
                        "special.laguerre_polynomial_l", "special.legendre_polynomial_p",
                        "special.shifted_chebyshev_polynomial_t", "special.shifted_chebyshev_polynomial_u",
                        "special.shifted_chebyshev_polynomial_v", "special.shifted_chebyshev_polynomial_w",
                        "special.zeta"}
SMALL_SAMPLE = 32768
# Not comparable by construction (the sample's values are not defined).
UNCOMPARABLE = {"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided", "empty_permuted"}
# Random ops: mtia generators are (seed, offset) pairs, like CUDA's Philox, so
# the values differ from CPU's. These are checked for CPU's shapes and dtypes
# and for the same values from the same seed (two mtia runs), OpInfo's skips
# (which are about comparing values with CPU) notwithstanding.
RANDOM_OPS = {"bernoulli", "cauchy", "exponential", "geometric", "log_normal", "multinomial", "normal", "uniform",
              "rand_like", "randint", "randint_like", "randn", "randn_like", "nn.functional.alpha_dropout",
              "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d",
              "nn.functional.feature_alpha_dropout", "nn.functional.rrelu"}
# (op, check) pairs whose CPU reference itself is undefined. Upstream bug:
# fft_ihfftn_impl calls at::conj_physical_out(tmp, out) with its arguments
# swapped, so the out= variants return uninitialized memory on every device.
UNCOMPARABLE_CHECKS = {("fft.ihfft2", "out"), ("fft.ihfftn", "out")}


# ---------------------------------------------------------------- worker side
def _worker():
    import torch
    from torch.testing._internal.common_methods_invocations import op_db
    from torch.utils._pytree import tree_leaves, tree_map

    warnings.simplefilter("ignore")

    def opinfo_decorations(op, dtype):
        """(skip reason or None, tolerance override or None) for test_compare_cpu."""
        tol = None
        for d in op.get_decorators("TestCommon", "test_compare_cpu", "mtia", dtype, {}):
            if d is unittest.expectedFailure:
                return "OpInfo xfail", None
            if getattr(d, "__qualname__", "") == "skip.<locals>.decorator":  # unittest.skip(...)
                return "OpInfo skip", None
            if hasattr(d, "d") and isinstance(d.d, dict) and dtype in d.d:
                t = d.d[dtype]  # toleranceOverride: tol(atol, rtol); precisionOverride: atol
                tol = (t.atol, t.rtol) if hasattr(t, "atol") else (t, 1.3e-6)
        return None, tol

    def faithful(x, device="mtia"):
        """x on `device` with the same storage layout (strides, offset, gaps),
        so non-contiguous samples stay non-contiguous and as_strided sees the
        same storage."""
        x = x.detach()
        if x.layout != torch.strided:
            return x.to(device)
        if x.is_conj():
            return faithful(x.conj(), device).conj()
        if x.is_neg():
            return x.resolve_neg().to(device)
        st = x.untyped_storage()
        n = st.nbytes() // x.element_size()
        base = torch.empty(0, dtype=x.dtype).set_(st, 0, (n,), (1,))
        return base.to(device, copy=True).as_strided(x.size(), x.stride(), x.storage_offset())

    def fresh_leaves(tree):
        """The CPU reference's inputs for gradients, made as the mtia ones are:
        a sample's leaf may be a view of a tensor that does not require grad,
        and autograd treats such a leaf differently from a fresh one."""
        return tree_map(lambda x: faithful(x, "cpu").requires_grad_(x.requires_grad)
                        if isinstance(x, torch.Tensor) else x, tree)

    def to_mtia(tree, op=None):
        def move(x):
            if isinstance(x, torch.device) and x.type == "cpu":
                return torch.device("mtia")
            if isinstance(x, str) and x == "cpu":
                return "mtia"
            if not isinstance(x, torch.Tensor):
                return x
            return faithful(x).requires_grad_(x.requires_grad)
        args, kwargs = tree
        if op is not None and op.name == "tensor_split" and len(args) > 1:
            # its index tensor must stay on the CPU (as for cuda)
            moved_args, moved_kwargs = tree_map(move, (args, kwargs))
            return (moved_args[0], args[1]) + tuple(moved_args[2:]), moved_kwargs
        return tree_map(move, tree)

    def grads(fn, args, kwargs):
        out = fn(*args, **kwargs)
        outs = [o for o in tree_leaves(out) if isinstance(o, torch.Tensor) and o.requires_grad]
        if not outs:
            return None
        ins = [x for x in tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor) and x.requires_grad]
        return torch.autograd.grad(sum(o.abs().sum() for o in outs), ins, allow_unused=True)

    def compare(actual, expected, dtype, tol):
        torch.mtia.synchronize()  # non_blocking results must have landed
        actual = tree_map(lambda x: x.cpu() if isinstance(x, torch.Tensor) else x, actual)
        if tol is not None:
            kw = dict(atol=tol[0], rtol=tol[1])
        elif dtype in (torch.bfloat16, torch.float16):
            kw = dict(atol=1e-2, rtol=1e-2)
        else:
            kw = dict(atol=1e-5, rtol=1.3e-6) if dtype in (torch.float32, torch.complex64) else {}
        try:
            torch.testing.assert_close(actual, expected, equal_nan=True, check_device=False, **kw)
        except AssertionError as e:
            if "bitwise comparison" not in str(e):
                raise
            torch.testing.assert_close(actual, expected, equal_nan=True, check_device=False, atol=0, rtol=0)

    def reference64(op, check, args, kwargs, dtype):
        """The sample computed in float64 (from the same low-precision inputs)."""
        def up(x):
            if isinstance(x, torch.Tensor) and x.dtype == dtype:
                return x.detach().double().requires_grad_(x.requires_grad)
            return x
        args64, kwargs64 = tree_map(up, (args, kwargs))
        return grads(op, args64, kwargs64) if check == "backward" else op(*args64, **kwargs64)

    def more_accurate(actual, expected, exact):
        """Whether every tensor of actual is at least as close to the float64
        result as CPU's, with NaN and infinities where CPU has them."""
        torch.mtia.synchronize()
        a_leaves, e_leaves, r_leaves = (tree_leaves(t) for t in (actual, expected, exact))
        if not (len(a_leaves) == len(e_leaves) == len(r_leaves)):
            return False
        for a, e, r in zip(a_leaves, e_leaves, r_leaves):
            if not isinstance(a, torch.Tensor) or not a.is_floating_point():
                if (a != e).any() if isinstance(a, torch.Tensor) else a != e:
                    return False
                continue
            if a.dtype != e.dtype:
                return False
            a, e, r = a.cpu().double(), e.double(), r.double()
            if a.shape != e.shape or not torch.equal(a.isnan(), e.isnan()):
                return False
            inf = e.isinf() | a.isinf()
            if not torch.equal(a[inf], e[inf]):
                return False
            finite = ~(e.isnan() | inf)
            if finite.any() and (a[finite] - r[finite]).abs().max() > (e[finite] - r[finite]).abs().max():
                return False
        return True

    def judge(op, check, args, kwargs, actual, expected, dtype, tol):
        """"pass" (agrees with CPU) or "more_accurate" (see the module's
        docstring); raises AssertionError otherwise."""
        try:
            compare(actual, expected, dtype, tol)
            return "pass"
        except AssertionError:
            if dtype not in (torch.bfloat16, torch.float16):
                raise
            try:
                exact = reference64(op, check, *fresh_leaves((args, kwargs)), dtype)
            except Exception:
                raise AssertionError("differs from CPU (no float64 reference)")
            if not more_accurate(actual, expected, exact):
                raise
            return "more_accurate"

    def meta(tree):
        return [(tuple(x.shape), x.dtype) for x in tree_leaves(tree) if isinstance(x, torch.Tensor)]

    def out_variant(op, args, kwargs, like, device):
        """Runs op(..., out=...) into fresh tensors on `device` shaped like `like`;
        returns the out tensors."""
        def alloc(x):
            return torch.empty_like(x, device=device) if isinstance(x, torch.Tensor) else x
        out = tree_map(alloc, like)
        if isinstance(out, list):
            out = tuple(out)
        if device == "mtia":
            args, kwargs = to_mtia((args, kwargs), op)
        op(*args, **kwargs, out=out)
        return out

    def classify(exc):
        msg = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
        if isinstance(exc, NotImplementedError) or "Could not run" in msg or "not implemented" in msg.lower():
            return "not_implemented", msg
        return "error", msg

    def compiled_run(op, check, args, kwargs):
        """op through a fresh torch.compile (Inductor): its outputs, or its
        gradients for the backward check."""
        torch._dynamo.reset()
        fn = torch.compile(lambda *a, **k: op(*a, **k))
        if check == "backward":
            return grads(fn, args, kwargs)
        return fn(*args, **kwargs)

    def compiled_outcome(op, check, args, kwargs, expected, dtype, tol):
        """(outcome, failure message) of one sample compiled on mtia. A sample
        that fails counts only if CPU Inductor gets it right (else it is
        cpu_compile_fails): CPU is compiled only for samples that fail on mtia."""
        try:
            torch.manual_seed(0)
            actual = compiled_run(op, check, *to_mtia((args, kwargs), op))
            return judge(op, check, args, kwargs, actual, expected, dtype, tol), None
        except Exception as e:
            kind, msg = ("fail", f"mismatch: {str(e).splitlines()[0][:300]}") if isinstance(e, AssertionError) \
                else classify(e)
            try:
                torch.mtia.synchronize()
            except Exception:
                pass
        try:
            torch.manual_seed(0)
            compare(compiled_run(op, check, args, kwargs), expected, dtype, tol)
        except Exception:
            return "cpu_compile_fails", None
        return kind, msg

    def eager_runs(op, check, args, kwargs, like):
        """op on mtia, twice: a signature's first call runs synchronously (on the
        real data: it makes the op's plan); the second takes the asynchronous
        path. Both are compared with CPU."""
        runs = []
        for _ in range(2):
            torch.manual_seed(0)
            if check == "backward":
                runs.append(grads(op, *to_mtia((args, kwargs), op)))
            elif check == "out":
                runs.append(out_variant(op, args, kwargs, like, "mtia"))
            else:
                margs, mkw = to_mtia((args, kwargs), op)
                runs.append(op(*margs, **mkw))
        return runs

    def run_op(index, dtype_names, max_samples, compiled=False):
        op = op_db[index]
        name = f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name
        res = {"op": name, "checks": {}}
        if compiled and op.name in RANDOM_OPS:
            return res
        for dname in dtype_names:
            dtype = getattr(torch, dname)
            if dtype not in op.supported_dtypes("cpu"):
                continue
            skip, tol = opinfo_decorations(op, dtype)
            random_op = op.name in RANDOM_OPS
            if random_op:
                skip = None  # OpInfo skips comparing random values with CPU's; this check compares runs
            small_only = skip is not None and name in COMPARE_DESPITE_SKIP
            if small_only:
                skip = None
            for check in COMPILED_CHECKS if compiled else CHECKS:
                if check == "backward" and (not op.supports_autograd or dname not in GRAD_DTYPES
                                            or dtype not in op.supported_backward_dtypes("cpu")):
                    continue
                if check == "out" and not op.supports_out:
                    continue
                if (name, check) in UNCOMPARABLE_CHECKS:
                    continue
                counts = collections.Counter()
                failures = []
                try:
                    samples = op.sample_inputs("cpu", dtype, requires_grad=(check == "backward"))
                    if small_only:
                        samples = (s for s in samples if sum(x.numel() for x in tree_leaves(
                            (s.input, s.args, s.kwargs)) if isinstance(x, torch.Tensor)) <= SMALL_SAMPLE)
                    samples = [s for _, s in zip(range(max_samples), samples)] if max_samples else list(samples)
                except Exception:
                    continue
                for s in samples:
                    if skip:
                        counts["skipped"] += 1
                        continue
                    if check == "noncontiguous":
                        try:
                            s = s.noncontiguous()
                        except Exception:
                            continue  # the sample cannot be made non-contiguous (e.g. sparse)
                    args, kwargs = (s.input,) + tuple(s.args), s.kwargs
                    like = None
                    try:
                        torch.manual_seed(0)
                        if check == "backward":
                            expected = grads(op, *fresh_leaves((args, kwargs)))
                            if expected is None:
                                continue
                        else:
                            expected = op(*args, **kwargs)
                        if check == "out":
                            if not isinstance(expected, (torch.Tensor, tuple, list)):
                                continue
                            like = expected
                            torch.manual_seed(0)
                            expected = out_variant(op, args, kwargs, like, "cpu")
                    except Exception:
                        continue  # CPU rejects the sample: not a conformance question
                    if compiled:
                        outcome, msg = compiled_outcome(op, check, args, kwargs, expected, dtype, tol)
                        counts[outcome] += 1
                        if msg:
                            failures.append(msg)
                        continue
                    try:
                        runs = eager_runs(op, check, args, kwargs, like)
                        actual = runs[-1]
                    except Exception as e:
                        kind, msg = classify(e)
                        counts[kind] += 1
                        failures.append(msg)
                        try:
                            torch.mtia.synchronize()
                        except Exception:
                            pass
                        continue
                    try:
                        if random_op:
                            # the mtia stream differs from CPU's: same shapes and
                            # dtypes as CPU, same values from the same seed
                            if meta(actual) != meta(expected):
                                raise AssertionError(f"shapes/dtypes {meta(actual)} != cpu {meta(expected)}")
                            compare(actual, tree_map(lambda x: x.cpu() if isinstance(x, torch.Tensor) else x,
                                                     runs[0]), dtype, (0, 0))
                            outcome = "pass"
                        else:
                            # the first call (often a signature's first: synchronous, on the
                            # real data) and the planned, asynchronous one
                            outcomes = [judge(op, check, args, kwargs, run, expected, dtype, tol) for run in runs]
                            outcome = "pass" if all(o == "pass" for o in outcomes) else "more_accurate"
                        counts[outcome] += 1
                    except Exception as e:
                        if isinstance(e, AssertionError):
                            counts["fail"] += 1
                            failures.append(f"mismatch: {str(e).splitlines()[0][:300]}")
                        else:  # e.g. an asynchronous error raised at the sync
                            kind, msg = classify(e)
                            counts[kind] += 1
                            failures.append(msg)
                if counts:
                    res["checks"].setdefault(check, {})[dname] = {
                        "counts": dict(counts), "failures": sorted(set(failures))[:5]}
        return res

    for line in sys.stdin:
        req = json.loads(line)
        try:
            out = run_op(req["index"], req["dtypes"], req["max_samples"], req.get("compiled", False))
        except Exception:
            out = {"op": str(req["index"]), "internal_error": traceback.format_exc()[-2000:], "checks": {}}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


# ---------------------------------------------------------------- driver side
class Worker:
    def __init__(self, threads):
        # `jobs` workers share the cores, as torchrun's processes do: each
        # one's kernels get its share of them (unless OMP_NUM_THREADS says):
        # teams of every core in each worker made the run 1.2-1.7x slower
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", str(threads))
        self.proc = subprocess.Popen([sys.executable, __file__, "--worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)

    def run(self, req):
        try:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:  # the worker died on this op
            self.proc.wait()
            return None
        return json.loads(line)

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except Exception:
            self.proc.kill()


def op_names():
    out = subprocess.run([sys.executable, "-c",
                          "import json, warnings; warnings.simplefilter('ignore');"
                          "from torch.testing._internal.common_methods_invocations import op_db;"
                          "print(json.dumps([[o.name, o.variant_test_name] for o in op_db]))"],
                         capture_output=True, text=True, check=True)
    return [f"{n}.{v}" if v else n for n, v in json.loads(out.stdout.strip().splitlines()[-1])]


def run_all(indices, names, dtypes, max_samples, jobs, full_ops=(), compiled=False, partial=None):
    """Runs the ops in worker processes; with `partial` (a path), the results so
    far are written there after each op (a long run can be followed, or cut)."""
    import threading

    results, lock = [], threading.Lock()
    queue = list(indices)
    threads_each = max(1, len(os.sched_getaffinity(0)) // jobs)

    def loop():
        worker = Worker(threads_each)
        while True:
            with lock:
                if not queue:
                    break
                index = queue.pop(0)
            samples = 0 if names[index] in full_ops else max_samples
            res = worker.run({"index": index, "dtypes": dtypes, "max_samples": samples, "compiled": compiled})
            if res is None:
                res = {"op": names[index], "crash": True, "checks": {}}
                worker = Worker(threads_each)
            with lock:
                results.append(res)
                if partial is not None:
                    partial.write_text(json.dumps(sorted(results, key=lambda r: r["op"]), indent=1))
        worker.close()

    threads = [threading.Thread(target=loop) for _ in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(results, key=lambda r: r["op"])


def failing_keys(results):
    keys = {}
    for r in results:
        if r.get("crash") or r.get("internal_error"):
            keys[f"{r['op']}|*|*"] = "crash" if r.get("crash") else "internal error"
        for check, per_dtype in r["checks"].items():
            for dtype, entry in per_dtype.items():
                c = entry["counts"]
                if c.get("fail") or c.get("error") or c.get("not_implemented"):
                    keys[f"{r['op']}|{check}|{dtype}"] = "; ".join(entry["failures"])[:300]
    return keys


def summarize(results, dtypes):
    totals = collections.defaultdict(collections.Counter)
    for r in results:
        for check, per_dtype in r["checks"].items():
            for dtype, entry in per_dtype.items():
                totals[(check, dtype)].update(entry["counts"])
    lines = ["| check | dtype | " + " | ".join(OUTCOMES) + " | pass % of executed |",
             "|---|---|" + "---|" * len(OUTCOMES) + "---|"]
    for check in CHECKS:  # (the compiled checks are among them)
        for dtype in dtypes:
            c = totals.get((check, dtype))
            if not c:
                continue
            executed = sum(c[k] for k in OUTCOMES if k not in NOT_EXECUTED)
            pct = 100.0 * sum(c[k] for k in PASSING) / executed if executed else 100.0
            lines.append(f"| {check} | {dtype} | " + " | ".join(str(c[k]) for k in OUTCOMES) + f" | {pct:.2f} |")
    crashes = [r["op"] for r in results if r.get("crash")]
    lines.append("")
    lines.append(f"ops run: {len(results)}; crashed ops: {len(crashes)} {crashes[:10] if crashes else ''}")
    return "\n".join(lines), totals


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--quick", action="store_true", help="CI slice: at most 2 samples per op, check and dtype")
    p.add_argument("--max-samples", type=int, default=0, help="samples per op, check and dtype (0: all)")
    p.add_argument("--ops", default="", help="comma-separated op names (default: all)")
    p.add_argument("--dtypes", default=None, help=f"default: {','.join(DTYPES)}; compiled: {','.join(COMPILED_DTYPES)}")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--compiled", action="store_true", help="each sample through torch.compile on mtia (and CPU)")
    p.add_argument("--out", default=None, help="default: conformance/results (compiled: results-compiled)")
    p.add_argument("--known", default=None, help="default: known_failures.json (compiled: known_failures_compiled.json)")
    args = p.parse_args()
    suffix = "_compiled" if args.compiled else ""
    args.dtypes = args.dtypes or ",".join(COMPILED_DTYPES if args.compiled else DTYPES)
    args.out = args.out or str(HERE / ("results-compiled" if args.compiled else "results"))
    args.known = args.known or str(HERE / f"known_failures{suffix}.json")
    if args.worker:
        return _worker()

    t0 = time.time()
    names = op_names()
    wanted = set(args.ops.split(",")) if args.ops else None
    indices = [i for i, n in enumerate(names)
               if n.split(".")[0] not in UNCOMPARABLE and (wanted is None or n in wanted or n.split(".")[0] in wanted)]
    dtypes = args.dtypes.split(",")
    max_samples = 2 if args.quick else args.max_samples
    if args.compiled:  # a compile per sample: one sample per op, check and dtype unless asked
        max_samples = max_samples or 1
    known = json.loads(Path(args.known).read_text()) if Path(args.known).exists() else {}
    # ops with known failures run every sample even in the quick slice, so that
    # a fixed one is noticed (eager mode; compiled runs keep max_samples)
    known_ops = set() if args.compiled else {k.split("|")[0] for k in known}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = run_all(indices, names, dtypes, max_samples, args.jobs, known_ops, args.compiled,
                      out / "results.partial.json")
    (out / "results.partial.json").unlink(missing_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    table, totals = summarize(results, dtypes)
    (out / "summary.md").write_text(table + "\n")
    print(table)

    failing = failing_keys(results)
    ran = {f"{r['op']}|{c}|{d}" for r in results for c, pd in r["checks"].items() for d in pd}
    ran |= {f"{r['op']}|*|*" for r in results}
    # a known failure is known by its key and its reason: the observed failure
    # must contain the entry's "match" text, or it fails for another reason
    new = {k: v for k, v in failing.items() if k not in known}
    other = {k: v for k, v in failing.items() if k in known and known[k]["match"] not in v}
    fixed = sorted(k for k in known if k in ran and k not in failing)
    print(f"\n{len(failing)} failing (op, check, dtype) entries, {len(known)} known; "
          f"{len(new)} new, {len(other)} failing for another reason, {len(fixed)} fixed; {time.time() - t0:.0f}s")
    for k, v in sorted(new.items()):
        print(f"NEW FAILURE {k}: {v}")
    for k, v in sorted(other.items()):
        print(f"FAILS FOR ANOTHER REASON {k}: expected {known[k]['match']!r}, got: {v}")
    for k in fixed:
        print(f"FIXED (remove from {Path(args.known).name}) {k}")
    return 1 if new or other or fixed else 0


if __name__ == "__main__":
    sys.exit(main())
