"""Holistic Trace Analysis (HTA) of torch.profiler traces of mtia: a summary
per rank, and plots.

    python examples/trace_summary.py TRACE_DIR [--plots DIR]

TRACE_DIR holds one Chrome trace per rank (as `examples/gpt.py --profile DIR`
writes them). HTA (`holistictraceanalysis` 0.5.0, scripts/setup.sh installs
it) reads them as it reads a real MTIA's, with two gaps of its own that
`mtia_analysis` closes for the analyses here (real MTIA traces have them
too):
- its critical path builds host nodes from CUDA's runtime categories only: an
  MTIA launch (`mtia_runtime`) is counted as a runtime event;
- 0.5.0 counts only `^nccl` kernels as communication (its source also
  `^hccl`, MTIA's collective library): `hta_counts_hccl()` adds `^hccl` for
  the duration of a call.
The plots are drawn with matplotlib from HTA's tables (HTA draws with plotly,
whose image export needs a browser engine this project does not install).
"""
import argparse
import contextlib
import logging
import math
import os
import re
import sys
import warnings


@contextlib.contextmanager
def hta_counts_hccl():
    """HTA 0.5.0's kernel types, with `^hccl` kernels as communication (as in
    HTA's source) while the block runs."""
    from hta.utils import utils

    saved = utils.NCCL_KERNEL_RE
    utils.NCCL_KERNEL_RE = re.compile(f"{saved.pattern}|(^hccl)")
    try:
        yield
    finally:
        utils.NCCL_KERNEL_RE = saved


def mtia_analysis(trace_dir):
    """HTA's TraceAnalysis of the folder, MTIA's launches counted as runtime
    events (critical path)."""
    from hta.trace_analysis import TraceAnalysis

    logging.getLogger("hta").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        analysis = TraceAnalysis(trace_dir=trace_dir)
    sym = analysis.t.symbol_table.sym_index
    if "mtia_runtime" in sym:
        sym.setdefault("cuda_runtime", sym["mtia_runtime"])
    return analysis


def last_step(analysis, rank):
    """The last ProfilerStep annotation of the rank's trace ("ProfilerStep#7")."""
    df = analysis.t.get_trace(rank)
    table = analysis.t.symbol_table.sym_table
    steps = sorted({table[i] for i in df["name"].unique() if table[i].startswith("ProfilerStep#")},
                   key=lambda s: int(s.split("#")[1]))
    return steps[-1] if steps else ""


def short_launches(analysis, rank):
    """The share of the rank's launch events that lasted under a microsecond."""
    df = analysis.t.get_trace(rank)
    sym = analysis.t.symbol_table.sym_index
    launches = df[df["cat"] == sym.get("mtia_runtime", -1)]
    return 100 * float((launches["dur"] < 1).mean()) if len(launches) else math.nan


def summarize(trace_dir, plots_dir=None):
    """Runs HTA's analyses on every rank's trace; returns {rank: figures} and
    prints them. With plots_dir, also writes temporal_breakdown.png,
    kernel_breakdown.png and queue_length.png there."""
    analysis = mtia_analysis(trace_dir)
    ranks = sorted(analysis.t.traces)
    with hta_counts_hccl(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        temporal = analysis.get_temporal_breakdown(visualize=False).set_index("rank")
        kinds, _ = analysis.get_gpu_kernel_breakdown(visualize=False)
        overlap = analysis.get_comm_comp_overlap(visualize=False).set_index("rank")
        idle = analysis.get_idle_time_breakdown(ranks=ranks, visualize=False)[0]
        launches = analysis.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False)
        queue = analysis.get_queue_length_time_series(ranks=ranks)
        figures = {}
        for rank in ranks:
            step = last_step(analysis, rank)
            graph, ok = analysis.critical_path_analysis(rank=rank, annotation=step, instance_id=0)
            edges = graph.get_critical_path_breakdown() if ok else None
            # (the default stream: 1)
            host_wait = idle[(idle["rank"] == rank) & (idle["stream"] == 1)
                             & (idle["idle_category"] == "host_wait")]["idle_time_ratio"]
            figures[rank] = {
                "idle %": float(temporal.loc[rank, "idle_time_pctg"]),
                "compute %": float(temporal.loc[rank, "compute_time_pctg"]),
                "non-compute %": float(temporal.loc[rank, "non_compute_time_pctg"]),
                "comm/comp overlap %": float(overlap.loc[rank, "comp_comm_overlap_pctg"]),
                "stream 1 idle waiting for the host %": 100 * float(host_wait.sum()) if len(host_wait) else math.nan,
                "kernels with their launch": len(launches.get(rank, [])),
                "max queue length": int(queue[rank]["queue_length"].max()),
                "critical path step": step,
                "critical path edges": 0 if edges is None else len(edges),
                "critical path device-bound %": math.nan if edges is None else
                100 * float(edges[edges["bound_by"] != "cpu_bound"]["duration"].sum() / edges["duration"].sum()),
                # HTA reads times in whole microseconds and leaves a kernel out
                # of a critical path if its launch lasted none
                "launches under 1 us %": short_launches(analysis, rank),
            }
    kernel_pct = {row["kernel_type"]: float(row["percentage"]) for _, row in kinds.iterrows()}
    for rank in ranks:
        print(f"rank {rank}: " + ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}"
                                           for k, v in figures[rank].items()))
    print("kernel time by type (all ranks): " + ", ".join(f"{k} {v:.1f}%" for k, v in kernel_pct.items()))
    if plots_dir:
        plot(plots_dir, temporal, kinds, queue)
    return figures, kernel_pct


def plot(plots_dir, temporal, kinds, queue):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(plots_dir, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 3))
    bottom = [0.0] * len(temporal)
    labels = [f"rank {r}" for r in temporal.index]
    for col, name in (("compute_time_pctg", "compute"), ("non_compute_time_pctg", "non-compute"),
                      ("idle_time_pctg", "idle")):
        ax.barh(labels, temporal[col], left=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, temporal[col])]
    ax.set_xlabel("% of the traced time")
    ax.set_title("HTA temporal breakdown (mtia)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=3, fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(plots_dir, "temporal_breakdown.png"), dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 3))
    ax.bar_label(ax.barh(kinds["kernel_type"], kinds["percentage"]), fmt="%.1f%%", fontsize=8)
    ax.set_xlabel("% of kernel time")
    ax.set_title("HTA kernel breakdown (mtia)")
    fig.tight_layout()
    fig.savefig(os.path.join(plots_dir, "kernel_breakdown.png"), dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 3))
    for rank, series in sorted(queue.items()):
        for stream, s in series.groupby("stream"):
            t0 = series["ts"].min()
            ax.step((s["ts"] - t0) / 1e3, s["queue_length"], where="post", label=f"rank {rank}, stream {stream}")
    ax.set_xlabel("ms since the first launch")
    ax.set_ylabel("tasks queued")
    ax.set_title("HTA queue length over time (mtia)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(plots_dir, "queue_length.png"), dpi=100)
    plt.close(fig)
    print(f"plots: {plots_dir}/temporal_breakdown.png, kernel_breakdown.png, queue_length.png")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace_dir")
    p.add_argument("--plots", help="write PNG plots to this folder")
    args = p.parse_args()
    summarize(args.trace_dir, args.plots)
    return 0


if __name__ == "__main__":
    sys.exit(main())
