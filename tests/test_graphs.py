"""torch.mtia.MTIAGraph: capture, replay, the rules a graph API enforces, RNG."""
import pytest
import torch

import openmtia

F = torch.nn.functional


def capture(fn, pool=None):
    g = torch.mtia.MTIAGraph()
    with torch.mtia.graph(g, pool=pool):
        out = fn()
    g.instantiate()
    return g, out


def test_capture_records_instead_of_running_and_replay_reruns_on_new_data():
    x = torch.ones(64, device="mtia")
    fn = lambda: (x * 2 + 1).sum()  # noqa: E731
    fn()  # warm up the plans
    torch.mtia.synchronize()
    g, y = capture(fn)
    addr = y.data_ptr()
    x.fill_(5.0)
    g.replay()
    assert y.item() == 64 * 11
    x.fill_(-1.0)
    g.replay()
    assert y.item() == -64 and y.data_ptr() == addr  # same device addresses across replays
    g.reset()


def test_replay_before_capture_end_is_an_error():
    g = torch.mtia.MTIAGraph()
    with pytest.raises(RuntimeError, match="replay before the capture ended"):
        g.replay()


def begin(g):
    if isinstance(g, torch.mtia.MTIAGraph):
        g.capture_begin((0, 0))
    else:
        g.capture_begin()


@pytest.mark.parametrize("make", [torch.mtia.MTIAGraph, torch.accelerator.Graph])
def test_keep_graph_false_replays_right_after_capture(make):
    # CUDAGraph's contract: keep_graph=False (the default) instantiates at capture_end
    g = make()
    x = torch.ones(4, device="mtia")
    with torch.mtia.stream(torch.mtia.Stream()):
        begin(g)
        x.add_(1)
        g.capture_end()
    g.replay()
    g.replay()
    assert torch.equal(x.cpu(), torch.full((4,), 3.0))  # capture ran nothing; two replays ran twice


@pytest.mark.parametrize("make", [torch.mtia.MTIAGraph, torch.accelerator.Graph])
def test_keep_graph_true_instantiates_at_the_first_replay(make):
    g = make(keep_graph=True)
    x = torch.ones(4, device="mtia")
    with torch.mtia.stream(torch.mtia.Stream()):
        begin(g)
        x.mul_(3)
        g.capture_end()
    g.replay()  # no instantiate() first
    assert torch.equal(x.cpu(), torch.full((4,), 3.0))
    g.instantiate()
    g.replay()
    assert torch.equal(x.cpu(), torch.full((4,), 9.0))


def test_torch_accelerator_graph_runs_device_generic_graph_code(tmp_path):
    x = torch.zeros(8, device="mtia")
    stream = torch.Stream(device="mtia")
    graph = torch.accelerator.Graph()
    with stream, graph:  # the docstring's example
        x += 1
    graph.replay()
    graph.replay()
    assert torch.equal(x.cpu(), torch.full((8,), 2.0))
    assert isinstance(graph.pool(), tuple)
    graph.debug_dump(str(tmp_path / "g.txt"))
    assert (tmp_path / "g.txt").read_text().split() == ["aten::add_"]
    graph.reset()
    with pytest.raises(RuntimeError, match="replay before the capture ended"):
        graph.replay()


def test_capture_on_the_default_stream_is_an_error():
    g = torch.mtia.MTIAGraph()
    with torch.mtia.stream(torch.mtia.default_stream()):
        with pytest.raises(RuntimeError, match="non-default stream"):
            g.capture_begin((0, 0))


@pytest.mark.parametrize("what", ["synchronize", "item", "pageable copy"])
def test_synchronizing_while_capturing_is_an_error_and_the_device_recovers(what):
    x = torch.ones(8, device="mtia")
    (x * 3).sum()
    torch.mtia.synchronize()
    g = torch.mtia.MTIAGraph()
    s = torch.mtia.Stream()
    with torch.mtia.stream(s):
        g.capture_begin((0, 0))
        try:
            y = x * 3
            with pytest.raises(RuntimeError, match="not permitted while .* is being captured"):
                if what == "synchronize":
                    torch.mtia.synchronize()
                elif what == "item":
                    y.sum().item()
                else:
                    y.cpu()
        finally:
            g.capture_end()
    g.reset()
    assert (x * 3).sum().item() == 24


def test_random_ops_give_new_values_per_replay_reproducibly():
    static = torch.empty(100, device="mtia")
    static.normal_()
    torch.mtia.synchronize()
    g, _ = capture(lambda: static.normal_())

    def replays():
        torch.mtia.manual_seed(3)
        out = []
        for _ in range(3):
            g.replay()
            out.append(static.cpu())
        return out
    first, again = replays(), replays()
    assert not torch.equal(first[0], first[1]) and not torch.equal(first[1], first[2])
    for a, b in zip(first, again):
        assert torch.equal(a, b)
    # a replay takes from the generator what the eager op takes: replay then
    # an eager draw equals running both eagerly
    torch.mtia.manual_seed(3)
    g.replay()
    replayed, after = static.cpu(), torch.randn(100, device="mtia").cpu()
    torch.mtia.manual_seed(3)
    static.normal_()
    assert torch.equal(static.cpu(), replayed)
    assert torch.equal(torch.randn(100, device="mtia").cpu(), after)


def test_tensors_allocated_while_capturing_come_from_the_graph_pool():
    x = torch.ones(1000, device="mtia")
    (x + 1) * 2
    torch.mtia.synchronize()
    g, y = capture(lambda: (x + 1) * 2)
    pool = g.pool()
    assert pool != (0, 0)
    other = torch.empty(1000, device="mtia")  # not from the graph's pool
    assert other.data_ptr() != y.data_ptr()
    h = torch.mtia.graph_pool_handle()
    g2, y2 = capture(lambda: x * 5, pool=h)
    assert g2.pool() == h
    g2.replay()
    assert torch.equal(y2.cpu(), torch.full((1000,), 5.0))
    g.reset()
    g2.reset()


def test_mlp_training_step_replays_equal_eager_steps():
    steps, warmup = 8, 3
    data = [(torch.randn(16, 12), torch.randn(16, 4)) for _ in range(steps)]

    def make():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to("mtia")
        return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def step(model, opt, x, y):
        loss = F.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
        return loss

    model, opt = make()
    eager = [step(model, opt, x.to("mtia"), y.to("mtia")).item() for x, y in data]
    eager_params = [p.detach().cpu() for p in model.parameters()]

    model, opt = make()
    sx, sy = torch.empty(16, 12, device="mtia"), torch.empty(16, 4, device="mtia")
    side = torch.mtia.Stream()
    losses = []
    with torch.mtia.stream(side):  # warm-up steps, eager, on a side stream (as for CUDA graphs)
        for x, y in data[:warmup]:
            sx.copy_(x)
            sy.copy_(y)
            losses.append(step(model, opt, sx, sy).item())
    g, static_loss = capture(lambda: step(model, opt, sx, sy))
    for x, y in data[warmup:]:
        sx.copy_(x)
        sy.copy_(y)
        g.replay()
        losses.append(static_loss.item())
    assert losses == pytest.approx(eager, rel=1e-6, abs=1e-7)
    for p, e in zip(model.parameters(), eager_params):
        torch.testing.assert_close(p.detach().cpu(), e, rtol=1e-6, atol=1e-7)
    g.reset()


def test_graph_api_misuse_raises_clear_errors():
    g = torch.mtia.MTIAGraph()
    with pytest.raises(RuntimeError, match="capture_end without capture_begin"):
        g.capture_end()
    with pytest.raises(RuntimeError, match="instantiate before the capture ended"):
        g.instantiate()
    s = torch.mtia.Stream()
    with torch.mtia.stream(s):
        g.capture_begin((0, 0))
        with pytest.raises(RuntimeError, match="reset while capturing"):
            g.reset()
        with pytest.raises(RuntimeError, match="already holds a capture"):
            g.capture_begin((0, 0))
        g.capture_end()
    g.reset()
    assert torch.ones(3, device="mtia").sum().item() == 3


def test_ops_that_must_synchronize_cannot_be_captured_and_say_why():
    x = torch.randn(16, device="mtia")
    m = torch.randn(3, 3, device="mtia")
    torch.mtia.synchronize()
    g = torch.mtia.MTIAGraph()
    with torch.mtia.stream(torch.mtia.Stream()):
        g.capture_begin((0, 0))
        try:
            with pytest.raises(RuntimeError, match="aten::nonzero cannot be captured into an MTIAGraph: it runs "
                                                   "synchronously .*shape depends on the data"):
                torch.nonzero(x)
            with pytest.raises(RuntimeError, match="aten::linalg_eig cannot be captured into an MTIAGraph: it runs "
                                                   "synchronously .*checks its input's values"):
                torch.linalg.eig(m)
        finally:
            g.capture_end()
    g.reset()


def test_a_signature_never_run_before_can_be_captured():
    # nothing waits during a capture: a new signature's call takes the Meta
    # kernel's plan instead of a synchronous first call
    big = torch.arange(517 * 333, dtype=torch.float32, device="mtia").view(517, 333)
    torch.mtia.synchronize()
    n = openmtia._C._plan_cache_stats()["first_calls"]
    g = torch.mtia.MTIAGraph()
    with torch.mtia.graph(g):
        y = torch.flip(big, [0])
        z = torch.cumsum(big, 1)
    g.instantiate()
    assert openmtia._C._plan_cache_stats()["first_calls"] == n
    big.mul_(2)
    g.replay()
    assert torch.equal(y.cpu(), torch.flip(big.cpu(), [0]))
    assert torch.equal(z.cpu(), torch.cumsum(big.cpu(), 1))


def test_transformer_training_step_replays_equal_eager_steps_bitwise():
    # most of its pointwise ops replay prebuilt kernels (csrc/aten/prebuilt.cpp)
    def make():
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        m = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).to("mtia")
        return m, torch.optim.SGD(m.parameters(), lr=1e-2, momentum=0.9)

    x, y = torch.randn(2, 8, 32, device="mtia"), torch.randn(2, 8, 32, device="mtia")

    def step(m, opt):
        loss = F.mse_loss(m(x), y)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
        return loss

    def restart(m, opt, init):  # initial parameters, zero momentum (as a first step)
        with torch.no_grad():
            for p, q in zip(m.parameters(), init.parameters()):
                p.copy_(q)
        for state in opt.state.values():
            state["momentum_buffer"].zero_()

    init, _ = make()
    eager_model, eager_opt = make()
    step(eager_model, eager_opt)
    restart(eager_model, eager_opt, init)
    eager = [step(eager_model, eager_opt).item() for _ in range(4)]

    model, opt = make()
    with torch.mtia.stream(torch.mtia.Stream()):  # warm-up, as for CUDA graphs
        for _ in range(3):
            step(model, opt)
    torch.mtia.synchronize()
    restart(model, opt, init)
    before = openmtia._C._prebuilt_kernel_count()
    g, loss = capture(lambda: step(model, opt))
    made = openmtia._C._prebuilt_kernel_count() - before
    # (prebuilding reads device memory on the host: none where the host may not, OPENMTIA_STRICT_MEMORY=1)
    # (SGD's foreach ops are one task over the list each, not a kernel per tensor)
    assert made > 30 if torch.mtia.get_device_properties(0)["host_addressable"] else made == 0, made
    replayed = []
    for _ in range(4):
        g.replay()
        replayed.append(loss.item())
    assert replayed == eager
    for p, q in zip(model.parameters(), eager_model.parameters()):
        assert torch.equal(p.detach().cpu(), q.detach().cpu())
    g.reset()
