"""Device randomness: every random op draws from the mtia generator."""
import pytest
import torch

RANDOM_OPS = {
    "rand": lambda g: torch.rand(64, device="mtia", generator=g),
    "randn": lambda g: torch.randn(64, device="mtia", generator=g),
    "randint": lambda g: torch.randint(0, 1000, (64,), device="mtia", generator=g),
    "normal_": lambda g: torch.empty(64, device="mtia").normal_(generator=g),
    "uniform_": lambda g: torch.empty(64, device="mtia").uniform_(generator=g),
    "bernoulli": lambda g: torch.bernoulli(torch.full((64,), 0.5, device="mtia"), generator=g),
    "randperm": lambda g: torch.randperm(64, device="mtia", generator=g),
    "multinomial": lambda g: torch.multinomial(torch.ones(64, device="mtia"), 16, generator=g),
    "exponential_": lambda g: torch.empty(64, device="mtia").exponential_(generator=g),
}


def dropout(_g):
    return torch.nn.functional.dropout(torch.ones(64, device="mtia"), 0.5, training=True)


@pytest.mark.parametrize("name", list(RANDOM_OPS) + ["dropout"])
def test_seeded_reproducible_and_independent_of_cpu(name):
    fn = RANDOM_OPS.get(name, dropout)
    torch.mtia.manual_seed(1234)
    a = fn(None).cpu()
    torch.manual_seed(999)  # the CPU generator must not matter...
    torch.mtia.manual_seed(1234)
    torch.rand(10)
    b = fn(None).cpu()
    assert torch.equal(a, b)
    torch.mtia.manual_seed(4321)  # ... the mtia one must
    assert not torch.equal(fn(None).cpu(), a)


@pytest.mark.parametrize("name", list(RANDOM_OPS))
def test_explicit_generator_and_state_replay(name):
    fn = RANDOM_OPS[name]
    g = torch.Generator(device="mtia").manual_seed(7)
    state = g.get_state()
    a = fn(g).cpu()
    g.set_state(state)
    assert torch.equal(fn(g).cpu(), a)
    torch.mtia.manual_seed(0)
    s = torch.mtia.get_rng_state()
    x = fn(None).cpu()
    torch.mtia.set_rng_state(s)
    assert torch.equal(fn(None).cpu(), x)


def test_devices_have_independent_generators():
    torch.mtia.manual_seed_all(3)
    a = torch.rand(8, device="mtia:0").cpu()
    torch.rand(1000, device="mtia:1")
    torch.mtia.manual_seed_all(3)
    torch.rand(1000, device="mtia:1")
    torch.rand(1000, device="mtia:1")
    assert torch.equal(torch.rand(8, device="mtia:0").cpu(), a)
    assert torch.mtia.default_generators[1].initial_seed() == 3


# ------------------------------------------------------------ distributions
# mtia's random streams differ from CPU's (Philox-like (seed, offset) pairs),
# so values cannot be compared; their distributions can. Each op draws N
# values on mtia and on CPU (fixed seeds: no flakiness) and must have CPU's
# support, moments and distribution (two-sample Kolmogorov-Smirnov test).
N = 100_000


def ks_statistic(a, b):
    """The two-sample Kolmogorov-Smirnov statistic D of two 1-D samples."""
    a, b = a.double().sort().values, b.double().sort().values
    grid = torch.cat([a, b])
    fa = torch.searchsorted(a, grid, right=True).double() / a.numel()
    fb = torch.searchsorted(b, grid, right=True).double() / b.numel()
    return (fa - fb).abs().max().item()


def ks_critical(n, m, alpha=1e-4):
    import math
    return math.sqrt(-math.log(alpha / 2) / 2) * math.sqrt((n + m) / (n * m))


def same_distribution(mtia, cpu, what, support=None):
    """mtia's sample has CPU's support (a (low, high) range, or a set of values),
    moments and distribution."""
    mtia, cpu = mtia.flatten().double(), cpu.flatten().double()
    if isinstance(support, set):
        extra = set(mtia.unique().tolist()) - support
        assert not extra, f"{what}: values outside the support: {sorted(extra)[:5]}"
    elif support is not None:
        assert mtia.min() >= support[0] and mtia.max() <= support[1], \
            f"{what}: values outside [{support[0]}, {support[1]}]: {mtia.min()}..{mtia.max()}"
    if what != "cauchy_":  # (no moments)
        se = cpu.std() / mtia.numel() ** 0.5
        assert (mtia.mean() - cpu.mean()).abs() < 6 * se * 2 ** 0.5 + 1e-12, f"{what}: means {mtia.mean()} vs {cpu.mean()}"
        assert (mtia.std() / cpu.std() - 1).abs() < 0.03, f"{what}: std {mtia.std()} vs {cpu.std()}"
    d = ks_statistic(mtia, cpu)
    assert d < ks_critical(mtia.numel(), cpu.numel()), f"{what}: KS statistic {d:.4f} (mtia and CPU differ)"


def _draw(name, device):
    o = dict(device=device)
    return {
        "rand": lambda: torch.rand(N, **o),
        "rand_bf16": lambda: torch.rand(N, dtype=torch.bfloat16, **o),
        "randn": lambda: torch.randn(N, **o),
        "randn_f64": lambda: torch.randn(N, dtype=torch.float64, **o),
        "randint": lambda: torch.randint(-5, 17, (N,), **o),
        "randint_like": lambda: torch.randint_like(torch.empty(N, **o), 3, 9),
        "uniform_": lambda: torch.empty(N, **o).uniform_(-2, 3),
        "normal_": lambda: torch.empty(N, **o).normal_(1.5, 0.25),
        "normal_tensor": lambda: torch.normal(torch.linspace(-1, 1, N, **o), torch.linspace(0.1, 2, N, **o)),
        "log_normal_": lambda: torch.empty(N, **o).log_normal_(0.5, 0.75),
        "exponential_": lambda: torch.empty(N, **o).exponential_(2.5),
        "cauchy_": lambda: torch.empty(N, **o).cauchy_(1.0, 0.5),
        "geometric_": lambda: torch.empty(N, **o).geometric_(0.3),
        "bernoulli": lambda: torch.bernoulli(torch.linspace(0, 1, N, **o)),
        "bernoulli_p": lambda: torch.empty(N, **o).bernoulli_(0.3),
        "multinomial": lambda: torch.multinomial(torch.tensor([1., 2, 3, 4, 0, 10], **o), N, replacement=True),
        "randperm_first": lambda: torch.stack([torch.randperm(50, **o)[:4] for _ in range(500)]),
        "dropout": lambda: torch.nn.functional.dropout(torch.ones(N, **o), 0.3, training=True),
        "alpha_dropout": lambda: torch.nn.functional.alpha_dropout(torch.randn(N, generator=torch.Generator().manual_seed(5)).to(device), 0.3, training=True),
        "rrelu": lambda: torch.nn.functional.rrelu(-torch.ones(N, **o), 0.1, 0.4, training=True),
    }[name]()


INF = float("inf")
SUPPORT = {
    "rand": (0, 1 - 2 ** -24), "rand_bf16": (0, 1), "randint": set(range(-5, 17)), "randint_like": set(range(3, 9)),
    "uniform_": (-2, 3), "log_normal_": (0, INF), "exponential_": (0, INF), "geometric_": set(range(1, 200)),
    "bernoulli": {0, 1}, "bernoulli_p": {0, 1}, "multinomial": {0, 1, 2, 3, 5}, "randperm_first": set(range(50)),
    "dropout": {0, torch.tensor(1 / 0.7, dtype=torch.float32).item()}, "rrelu": (-0.4, -0.1),
}


@pytest.mark.parametrize("name", ["rand", "rand_bf16", "randn", "randn_f64", "randint", "randint_like", "uniform_",
                                  "normal_", "normal_tensor", "log_normal_", "exponential_", "cauchy_", "geometric_",
                                  "bernoulli", "bernoulli_p", "multinomial", "randperm_first", "dropout",
                                  "alpha_dropout", "rrelu"])
def test_random_ops_have_cpus_distribution(name):
    torch.manual_seed(11)
    torch.mtia.manual_seed(12)
    cpu = _draw(name, "cpu")
    # a signature's first call (synchronous) and a later one
    first, later = _draw(name, "mtia").cpu(), _draw(name, "mtia").cpu()
    assert first.dtype == cpu.dtype and first.shape == cpu.shape
    assert not torch.equal(first, later), f"{name}: two draws gave the same values"
    for got in (first, later):
        same_distribution(got, cpu, name, SUPPORT.get(name))
    if name == "randperm_first":
        perms = torch.stack([torch.randperm(50, device="mtia") for _ in range(20)]).cpu()
        assert torch.equal(perms.sort(dim=1).values, torch.arange(50).expand(20, 50))


def test_the_distribution_check_can_fail():
    torch.manual_seed(0)
    torch.mtia.manual_seed(0)
    cpu = torch.rand(N)
    with pytest.raises(AssertionError, match="KS statistic|means"):
        same_distribution(torch.rand(N, device="mtia").cpu() * 0.98, cpu, "rand scaled by 0.98")
    with pytest.raises(AssertionError, match="std"):
        same_distribution(torch.randn(N, device="mtia").cpu() * 1.05, torch.randn(N), "randn scaled by 1.05")
    with pytest.raises(AssertionError, match="outside the support"):
        same_distribution(torch.randint(0, 11, (N,), device="mtia").cpu(), torch.randint(0, 11, (N,)), "randint",
                          set(range(10)))
