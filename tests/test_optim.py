"""Tests for gatfast.optim: step-by-step agreement with torch.optim in float64,
clip_grad_norm vs torch, checkpoints, validation."""

import io

import numba
import numpy as np
import pytest

from gatfast import CSRGraph
from gatfast.models import GATv2Network, softmax_cross_entropy
from gatfast.optim import SGD, Adam, AdamW, clip_grad_norm

SHAPES = {"layers.0.W_l": (4, 3), "layers.0.bias": (5,), "head.weight": (2, 2, 2)}


def problem(steps=6, seed=0):
    rng = np.random.default_rng(seed)
    init = {k: rng.normal(size=s) for k, s in SHAPES.items()}
    grads = [{k: rng.normal(size=s) for k, s in SHAPES.items()} for _ in range(steps)]
    return init, grads


def compare_with_torch(make_ours, make_torch, steps=6, new_lr=None, skip=None):
    """Run both optimizers on the same parameter/gradient sequence and compare after every step.

    ``new_lr`` is set on both halfway; ``skip`` names a parameter whose gradient is None on odd steps.
    """
    torch = pytest.importorskip("torch")
    init, grads = problem(steps)
    ours = {k: v.copy() for k, v in init.items()}
    opt = make_ours(ours)
    tparams = {k: torch.tensor(v.copy(), requires_grad=True) for k, v in init.items()}
    topt = make_torch(list(tparams.values()))
    for t, g in enumerate(grads):
        if new_lr is not None and t == steps // 2:
            opt.lr = new_lr
            for group in topt.param_groups:
                group["lr"] = new_lr
        g = dict(g, x=np.zeros(3))  # extra keys such as the input gradient are ignored
        if skip is not None and t % 2:
            g[skip] = None
        opt.step(g)
        for k, p in tparams.items():
            p.grad = None if g[k] is None else torch.tensor(g[k])
        topt.step()
        for k in SHAPES:
            np.testing.assert_allclose(
                ours[k],
                tparams[k].detach().numpy(),
                rtol=1e-12,
                atol=1e-14,
                err_msg=f"{k} after step {t + 1}",
            )
    return opt, ours


SGD_CONFIGS = [
    dict(lr=0.1),
    dict(lr=0.05, momentum=0.9),
    dict(lr=0.05, momentum=0.9, nesterov=True),
    dict(lr=0.05, momentum=0.8, dampening=0.3, weight_decay=1e-2),
    dict(lr=0.02, weight_decay=5e-2),
    dict(lr=0.02, momentum=0.5, nesterov=True, weight_decay=1e-3),
]


@pytest.mark.parametrize("kw", SGD_CONFIGS, ids=str)
def test_sgd_matches_torch(kw):
    torch = pytest.importorskip("torch")
    compare_with_torch(lambda p: SGD(p, **kw), lambda p: torch.optim.SGD(p, **kw))


ADAM_CONFIGS = [
    dict(lr=0.005),
    dict(lr=0.01, weight_decay=5e-4),
    dict(lr=0.01, betas=(0.5, 0.9), eps=1e-3),  # lerp weight 0.5 takes torch's second branch
    dict(lr=0.003, betas=(0.2, 0.0)),
]


@pytest.mark.parametrize("kw", ADAM_CONFIGS, ids=str)
def test_adam_matches_torch(kw):
    torch = pytest.importorskip("torch")
    compare_with_torch(lambda p: Adam(p, **kw), lambda p: torch.optim.Adam(p, **kw))


@pytest.mark.parametrize(
    "kw", [dict(), dict(lr=0.01, weight_decay=0.1), dict(betas=(0.8, 0.99), eps=1e-6)], ids=str
)
def test_adamw_matches_torch(kw):
    torch = pytest.importorskip("torch")
    compare_with_torch(lambda p: AdamW(p, **kw), lambda p: torch.optim.AdamW(p, **kw))


def test_defaults_match_the_documented_values():
    torch = pytest.importorskip("torch")
    compare_with_torch(lambda p: SGD(p), lambda p: torch.optim.SGD(p, lr=0.01))
    compare_with_torch(lambda p: Adam(p), lambda p: torch.optim.Adam(p, lr=0.005))
    compare_with_torch(lambda p: AdamW(p), lambda p: torch.optim.AdamW(p, lr=0.001, weight_decay=0.01))


def test_lr_change_and_none_gradients_match_torch():
    torch = pytest.importorskip("torch")
    compare_with_torch(
        lambda p: Adam(p, lr=0.01),
        lambda p: torch.optim.Adam(p, lr=0.01),
        steps=8,
        new_lr=0.002,
        skip="layers.0.bias",
    )
    compare_with_torch(
        lambda p: SGD(p, lr=0.1, momentum=0.9, nesterov=True),
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True),
        steps=8,
        new_lr=0.03,
        skip="head.weight",
    )


def test_float32_parameters_stay_float32_in_place():
    rng = np.random.default_rng(0)
    p = {"w": rng.normal(size=(3, 3)).astype(np.float32)}
    ref = p["w"]
    opt = Adam(p, lr=0.1)
    opt.step({"w": rng.normal(size=(3, 3))})  # float64 gradient is cast to the parameter's dtype
    assert p["w"] is ref and ref.dtype == np.float32
    assert opt.state["w"]["exp_avg"].dtype == np.float32


@pytest.mark.parametrize(
    "make",
    [
        lambda p: SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3),
        lambda p: Adam(p, lr=0.01, weight_decay=1e-3),
        lambda p: AdamW(p, lr=0.01),
    ],
    ids=["SGD", "Adam", "AdamW"],
)
def test_state_dict_round_trip_continues_identically(make, tmp_path):
    init, grads = problem(steps=6, seed=3)
    a = {k: v.copy() for k, v in init.items()}
    opt = make(a)
    for g in grads[:3]:
        opt.step(g)
    sd = opt.state_dict()
    assert all(isinstance(v, (int, float, bool, np.ndarray)) for v in sd.values())
    # through .npz, as a checkpoint would store it (numbers come back as 0-d arrays)
    buf = io.BytesIO()
    np.savez(buf, **sd)
    buf.seek(0)
    loaded = dict(np.load(buf))
    b = {k: v.copy() for k, v in a.items()}
    opt2 = make(b)
    opt2.lr = 0.5  # overwritten by the checkpoint
    opt2.load_state_dict(loaded)
    assert opt2.lr == opt.lr
    for g in grads[3:]:
        opt.step(g)
        opt2.step(g)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    # the state dict held copies: later steps did not change it
    key = next(k for k in sd if isinstance(sd[k], np.ndarray))
    np.testing.assert_array_equal(sd[key], loaded[key])
    assert not np.array_equal(sd[key], opt.state_dict()[key])


def test_load_state_dict_rejects_mismatches():
    init, grads = problem()
    adam = Adam({k: v.copy() for k, v in init.items()})
    adam.step(grads[0])
    sd = adam.state_dict()
    sgd = SGD({k: v.copy() for k, v in init.items()}, momentum=0.9)
    with pytest.raises(KeyError, match="state_dict is missing hyperparameter 'momentum' for SGD"):
        sgd.load_state_dict(sd)
    fresh = Adam({k: v.copy() for k, v in init.items()})
    with pytest.raises(ValueError, match=r"state_dict\['exp_avg.layers.0.W_l'\] must have shape \(4, 3\)"):
        fresh.load_state_dict(dict(sd, **{"exp_avg.layers.0.W_l": np.zeros((3, 4))}))
    with pytest.raises(KeyError, match="unexpected key 'exp_avg.nope'"):
        fresh.load_state_dict(dict(sd, **{"exp_avg.nope": np.zeros(2)}))
    partial = {k: v for k, v in sd.items() if k != "exp_avg_sq.head.weight"}
    with pytest.raises(KeyError, match="incomplete state for 'head.weight'"):
        fresh.load_state_dict(partial)
    with pytest.raises(ValueError, match=r"betas\[0\] must be < 1"):
        fresh.load_state_dict(dict(sd, beta1=1.0))
    with pytest.raises(TypeError, match="state_dict must be a mapping"):
        fresh.load_state_dict([])
    assert fresh.state == {k: {} for k in SHAPES}  # nothing half-loaded


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_clip_grad_norm_matches_torch(norm_type, max_norm):
    torch = pytest.importorskip("torch")
    _, grads = problem(steps=1)
    g = {k: v.copy() for k, v in grads[0].items()}
    x = np.ones((2, 2)) * 100.0
    g["x"] = x.copy()
    g["unused"] = None
    ts = [torch.tensor(v.copy(), requires_grad=True) for v in grads[0].values()]
    for t, v in zip(ts, grads[0].values()):
        t.grad = torch.tensor(v.copy())
    ref = torch.nn.utils.clip_grad_norm_(ts, max_norm, norm_type=norm_type)
    total = clip_grad_norm(g, max_norm, norm_type=norm_type)
    assert isinstance(total, float)
    assert total == pytest.approx(ref.item(), rel=1e-13)
    for k, t in zip(grads[0], ts):
        np.testing.assert_allclose(g[k], t.grad.numpy(), rtol=1e-13, atol=1e-15)
    np.testing.assert_array_equal(g["x"], x)  # ignored
    if max_norm < total:
        assert not np.allclose(g["layers.0.W_l"], grads[0]["layers.0.W_l"])


def test_clip_grad_norm_bad_input_and_empty():
    assert clip_grad_norm({"x": np.ones(3), "a": None}, 1.0) == 0.0
    with pytest.raises(ValueError, match="max_norm must be > 0"):
        clip_grad_norm({"a": np.ones(3)}, 0.0)
    with pytest.raises(ValueError, match="norm_type must be a positive number or inf"):
        clip_grad_norm({"a": np.ones(3)}, 1.0, norm_type=-2)
    with pytest.raises(TypeError, match=r"grads\['a'\] must be a floating-point numpy array"):
        clip_grad_norm({"a": [1.0, 2.0]}, 1.0)
    with pytest.raises(TypeError, match="grads must be a mapping"):
        clip_grad_norm([np.ones(3)], 1.0)


def test_hyperparameter_validation():
    p = {"w": np.zeros(3)}
    with pytest.raises(ValueError, match="lr must be > 0"):
        SGD(p, lr=0.0)
    with pytest.raises(ValueError, match="lr must be finite"):
        Adam(p, lr=float("nan"))
    with pytest.raises(ValueError, match="momentum must be >= 0"):
        SGD(p, momentum=-0.1)
    with pytest.raises(ValueError, match="nesterov=True requires momentum > 0 and dampening == 0"):
        SGD(p, nesterov=True)
    with pytest.raises(ValueError, match="nesterov=True requires momentum > 0 and dampening == 0"):
        SGD(p, momentum=0.9, dampening=0.1, nesterov=True)
    with pytest.raises(ValueError, match="weight_decay must be >= 0"):
        SGD(p, weight_decay=-1e-4)
    with pytest.raises(ValueError, match=r"betas\[1\] must be < 1"):
        Adam(p, betas=(0.9, 1.0))
    with pytest.raises(ValueError, match=r"betas\[0\] must be >= 0"):
        AdamW(p, betas=(-0.1, 0.9))
    with pytest.raises(TypeError, match="betas must be a pair"):
        Adam(p, betas=0.9)
    with pytest.raises(ValueError, match="eps must be >= 0"):
        Adam(p, eps=-1e-8)
    with pytest.raises(TypeError, match="nesterov must be a bool"):
        SGD(p, momentum=0.9, nesterov="yes")
    opt = Adam(p)
    with pytest.raises(ValueError, match="lr must be > 0"):
        opt.lr = -1.0
    assert opt.lr == 0.005
    with pytest.raises(TypeError, match="params must be a mapping"):
        SGD([np.zeros(3)])
    with pytest.raises(ValueError, match="params must contain at least one array"):
        SGD({})
    with pytest.raises(TypeError, match=r"params\['w'\] must be a floating-point numpy array"):
        SGD({"w": np.zeros(3, dtype=np.int64)})
    ro = np.zeros(3)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match=r"params\['w'\] must be writeable"):
        SGD({"w": ro})


def test_step_validates_all_gradients_before_updating():
    p = {"a": np.ones(3), "b": np.ones(2)}
    opt = SGD(p, lr=0.1, momentum=0.9)
    with pytest.raises(KeyError, match="grads is missing 'b'"):
        opt.step({"a": np.ones(3)})
    with pytest.raises(ValueError, match=r"grads\['b'\] must have shape \(2,\)"):
        opt.step({"a": np.ones(3), "b": np.ones(3)})
    with pytest.raises(ValueError, match=r"grads\['b'\] must be finite"):
        opt.step({"a": np.ones(3), "b": np.array([1.0, np.nan])})
    with pytest.raises(TypeError, match=r"grads\['a'\] must be a floating-point array"):
        opt.step({"a": np.ones(3, dtype=int), "b": np.ones(2)})
    with pytest.raises(TypeError, match="grads must be a mapping"):
        opt.step([np.ones(3)])
    np.testing.assert_array_equal(p["a"], 1.0)  # untouched by the failed steps
    assert opt.state == {"a": {}, "b": {}}


def test_adam_trains_a_network():
    """End to end: the optimizer updates the model's own arrays and the loss falls."""
    before = numba.get_num_threads()
    numba.set_num_threads(1)  # many tiny kernel calls; see tests/test_model.py
    try:
        rng = np.random.default_rng(0)
        n = 40
        y = rng.integers(0, 3, n)
        x = np.eye(3)[y] + 0.5 * rng.normal(size=(n, 3))
        src, dst = rng.integers(0, n, 400), rng.integers(0, n, 400)
        same = y[src] == y[dst]  # a homophilous graph, as in citation networks
        g = CSRGraph.from_edge_index(np.stack([src[same], dst[same]]), n)
        model = GATv2Network(3, 4, 3, heads=2, dropout=0.1, attention_dropout=0.1, seed=0, dtype=np.float64)
        opt = Adam(model.parameters(), lr=0.05, weight_decay=5e-4)
        first = softmax_cross_entropy(model.output(g, x), y)[0]
        for _ in range(40):
            out, cache = model.forward(g, x, training=True)
            _, grad = softmax_cross_entropy(out, y)
            grads = model.backward(cache, grad)
            clip_grad_norm(grads, 5.0)
            opt.step(grads)
        last = softmax_cross_entropy(model.output(g, x), y)[0]
        assert last < 0.5 * first
    finally:
        numba.set_num_threads(before)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "make",
    [
        lambda p: Adam(p, lr=0.01),
        lambda p: Adam(p, lr=0.01, weight_decay=1e-3),
        lambda p: AdamW(p, lr=0.01),
        lambda p: Adam(p, lr=0.01, betas=(0.3, 0.99)),
        lambda p: AdamW(p, lr=0.01, betas=(0.4, 0.9), weight_decay=0.1),
    ],
    ids=["Adam", "Adam-wd", "AdamW", "Adam-beta1-low", "AdamW-beta1-low"],
)
def test_adam_kernel_gives_the_numpy_passes_bits(monkeypatch, make, dtype):
    import gatfast.optim.adam as adam

    rng = np.random.default_rng(0)
    init = {"W": rng.standard_normal((7, 9)).astype(dtype), "b": rng.standard_normal(33).astype(dtype)}
    grads = [{k: rng.standard_normal(v.shape).astype(dtype) for k, v in init.items()} for _ in range(12)]
    results = []
    for kernel_dtypes in (adam._KERNEL_DTYPES, ()):  # the one-pass kernel, then NumPy's passes
        monkeypatch.setattr(adam, "_KERNEL_DTYPES", kernel_dtypes)
        params = {k: v.copy() for k, v in init.items()}
        opt = make(params)
        for g in grads:
            opt.step(g)
        results.append((params, opt.state_dict()))
    (fused, fused_state), (passes, passes_state) = results
    for k in init:
        assert not np.array_equal(fused[k], init[k])
        assert fused[k].tobytes() == passes[k].tobytes(), k
    for k, v in passes_state.items():
        assert np.asarray(fused_state[k]).tobytes() == np.asarray(v).tobytes(), k


def test_adam_with_eps_zero_gives_nan_on_a_zero_gradient_as_torch_does():
    params = {"w": np.ones(4, np.float32)}
    Adam(params, eps=0.0).step({"w": np.zeros(4, np.float32)})
    assert np.isnan(params["w"]).all()  # 0 / 0 in the kernel, not a ZeroDivisionError


def test_adam_updates_a_non_contiguous_parameter_in_place():
    rng = np.random.default_rng(1)
    base = rng.standard_normal((6, 8))
    view = base[:, ::2]  # a strided view: the NumPy passes, still in place
    want = view.copy()
    Adam({"w": want}, lr=0.1).step({"w": np.ones_like(want)})
    Adam({"w": view}, lr=0.1).step({"w": np.ones_like(view)})
    assert np.array_equal(base[:, ::2], want)


def test_adam_refuses_a_state_of_another_shape_instead_of_reading_past_it():
    params = {"w": np.zeros(1000, np.float32)}
    opt = Adam(params)
    opt.step({"w": np.ones(1000, np.float32)})
    opt.state["w"]["exp_avg"] = np.zeros(4, np.float32)  # the kernel would run 1000 steps over 4 values
    with pytest.raises(ValueError, match="Adam state of 'w' has shapes"):
        opt.step({"w": np.ones(1000, np.float32)})


def test_adam_state_of_a_0d_parameter_round_trips_through_another_dtype():
    params = {"s": np.array(0.5, np.float32), "v": np.ones(3, np.float32)}
    opt = Adam(params, lr=0.1)
    opt.step({"s": np.array(1.0, np.float32), "v": np.ones(3, np.float32)})
    state = {k: v.astype(np.float64) if isinstance(v, np.ndarray) else v for k, v in opt.state_dict().items()}
    fresh_params = {k: v.copy() for k, v in params.items()}
    fresh = Adam(fresh_params, lr=0.1)
    fresh.load_state_dict(state)
    assert fresh.state["s"]["exp_avg"].shape == ()
    for o, p in ((opt, params), (fresh, fresh_params)):
        o.step({"s": np.array(2.0, np.float32), "v": np.ones(3, np.float32)})
    assert params["s"].tobytes() == fresh_params["s"].tobytes()
    fresh.load_state_dict(fresh.state_dict())  # its own state reloads


def _network_params(dtype, seed=0):
    net = GATv2Network(6, 8, 3, num_layers=3, heads=2, seed=seed, dtype=dtype)
    return net.parameters()


def _run(make, init, grads, flat, actions=()):
    """Steps of a new optimizer over copies of ``init``; ``flat=False`` keeps it on the per-array path."""
    params = {k: v.copy() for k, v in init.items()}
    opt = make(params)
    if not flat:
        opt._flat = False
    for t, g in enumerate(grads):
        for when, action in actions:
            if when == t:
                action(opt)
        opt.step(g)
    return params, opt


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "make",
    [lambda p: Adam(p, lr=0.01, weight_decay=1e-3), lambda p: AdamW(p, lr=0.01, betas=(0.4, 0.9))],
    ids=["Adam", "AdamW"],
)
def test_flat_step_gives_the_per_array_bits(make, dtype, monkeypatch):
    """All parameters in one kernel call on flat buffers: the same bits as one call per array, through
    skipped gradients (per-array steps in between), a learning-rate change, a state loaded from a
    dict and a state reset."""
    init = _network_params(dtype)
    rng = np.random.default_rng(1)
    grads = [{k: rng.standard_normal(v.shape).astype(dtype) for k, v in init.items()} for _ in range(12)]
    first = next(iter(init))
    grads[3] = dict(grads[3], **{first: None})  # one parameter skipped: its step count lags ...
    grads[4] = {k: (g if k == first else None) for k, g in grads[4].items()}  # ... and catches up
    saved = {}

    def save(opt):
        saved["state"] = opt.state_dict()

    def load(opt):  # the state of two steps before, in new arrays: the flat path copies them in once
        opt.load_state_dict(saved["state"])

    def lr(opt):
        opt.lr = 0.003

    def reset(opt):
        opt.zero_state()

    actions = [(6, save), (8, load), (9, lr), (10, reset)]
    from gatfast.optim.flat import FlatMoments

    step_index, flat_steps = [-1], []
    update = FlatMoments.update

    def counted(self, scalars):
        flat_steps.append(step_index[0])
        return update(self, scalars)

    def count_steps(opt):  # from step 0 on: which steps take the flat path
        step = opt.step

        def numbered(g):
            step_index[0] += 1
            return step(g)

        opt.step = numbered

    monkeypatch.setattr(FlatMoments, "update", counted)
    flat, opt = _run(make, init, grads, flat=True, actions=[(0, count_steps), *actions])
    assert flat_steps == [0, 1, 2, 5, 6, 7, 8, 9, 10, 11]  # per-array only where a step count lags
    assert np.shares_memory(opt.state[first]["exp_avg"], opt._flat.m)  # the moments are its views
    per_array, opt_ref = _run(make, init, grads, flat=False, actions=actions)
    for k in init:
        assert not np.array_equal(flat[k], init[k])
        assert flat[k].tobytes() == per_array[k].tobytes(), k
    for k, v in opt_ref.state_dict().items():
        assert np.asarray(opt.state_dict()[k]).tobytes() == np.asarray(v).tobytes(), k


def test_flat_step_leaves_aliased_and_mixed_parameters_to_the_per_array_path():
    w = np.ones((3, 4))
    opt = Adam({"w": w, "w_rows": w[:2]}, lr=0.1)  # two names for overlapping memory
    opt.step({"w": np.ones((3, 4)), "w_rows": np.ones((2, 4))})
    assert opt._flat is False
    opt = Adam({"a": np.ones(3, np.float32), "b": np.ones(3)}, lr=0.1)  # two dtypes
    opt.step({"a": np.ones(3, np.float32), "b": np.ones(3)})
    assert opt._flat is False and opt.state["a"]["step"] == opt.state["b"]["step"] == 1


def test_flat_step_checks_every_gradient_before_updating_and_names_the_bad_one():
    params = {"a": np.ones(3, np.float32), "b": np.ones(2, np.float32)}
    opt = Adam(params, lr=0.1)
    opt.step({"a": np.ones(3, np.float32), "b": np.ones(2, np.float32)})
    before = {k: v.copy() for k, v in params.items()}
    state = opt.state_dict()
    with pytest.raises(ValueError, match=r"grads\['b'\] must be finite"):
        opt.step({"a": np.ones(3, np.float32), "b": np.array([1.0, np.inf], np.float32)})
    with pytest.raises(KeyError, match="grads is missing 'b'"):
        opt.step({"a": np.ones(3, np.float32)})
    for k in params:
        assert params[k].tobytes() == before[k].tobytes()
    for k, v in opt.state_dict().items():
        assert np.asarray(v).tobytes() == np.asarray(state[k]).tobytes()


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_a_copied_optimizer_updates_its_own_parameters(how):
    """The flat buffers hold views of the parameters: a copy must not write through the original's."""
    import copy
    import pickle

    params = {"a": np.ones(3, np.float32), "b": np.ones(2, np.float32)}
    opt = Adam(params, lr=0.1)
    grads = {"a": np.full(3, 0.5, np.float32), "b": np.full(2, -0.5, np.float32)}
    opt.step(grads)
    twin = copy.deepcopy(opt) if how == "deepcopy" else pickle.loads(pickle.dumps(opt))
    assert twin.params["a"] is not params["a"]
    before = {k: v.copy() for k, v in params.items()}
    twin.step(grads)
    for k in params:
        assert params[k].tobytes() == before[k].tobytes()  # the original's arrays are untouched
        assert not np.array_equal(twin.params[k], before[k])
    opt.step(grads)
    for k in params:
        assert params[k].tobytes() == twin.params[k].tobytes()


def test_flat_step_follows_a_parameter_replaced_in_the_mapping():
    params = {"a": np.ones(3, np.float32), "b": np.ones(2, np.float32)}
    opt = Adam(params, lr=0.1)
    grads = {"a": np.ones(3, np.float32), "b": np.ones(2, np.float32)}
    opt.step(grads)
    old, new = opt.params["b"], np.ones(2, np.float32)
    kept = old.copy()
    opt.params["b"] = new
    opt.step(grads)
    assert np.all(new != 1.0) and old.tobytes() == kept.tobytes()  # the step went to the array now named
    assert opt._flat is not False and opt._flat.arrays[1] is new  # buffers laid out again for it


def test_flat_step_takes_each_replaced_moment_and_refuses_a_misfit():
    """A moment replaced in the state (here only the second, to reset it) is copied in on its own, as the
    per-array path would use it; one of another shape goes to the per-array path, which names it."""
    init = {"a": np.ones(3, np.float32), "b": np.ones(2, np.float32)}
    grads = {"a": np.full(3, 0.5, np.float32), "b": np.full(2, -0.5, np.float32)}
    results = []
    for flat in (True, False):
        params = {k: v.copy() for k, v in init.items()}
        opt = Adam(params, lr=0.1)
        if not flat:
            opt._flat = False
        opt.step(grads)
        opt.state["a"]["exp_avg_sq"] = np.full(3, 100.0, np.float32)
        opt.step(grads)
        results.append((params, opt.state_dict()))
    (got, got_state), (want, want_state) = results
    for k in init:
        assert got[k].tobytes() == want[k].tobytes(), k
    for k, v in want_state.items():
        assert np.asarray(got_state[k]).tobytes() == np.asarray(v).tobytes(), k
    opt = Adam({k: v.copy() for k, v in init.items()}, lr=0.1)
    opt.step(grads)
    opt.state["b"]["exp_avg"] = np.zeros(1, np.float32)  # would broadcast into the flat buffer
    with pytest.raises(ValueError, match="a state_dict of another model"):
        opt.step(grads)


def test_flat_step_is_kept_for_small_parameters():
    from gatfast.optim.flat import MEAN_SIZE

    small = {"a": np.ones(MEAN_SIZE, np.float32), "b": np.ones(MEAN_SIZE, np.float32)}
    big = {"a": np.ones(MEAN_SIZE + 1, np.float32), "b": np.ones(MEAN_SIZE, np.float32)}
    for params, flat in ((small, True), (big, False)):
        opt = Adam(params, lr=0.1)
        opt.step({k: np.ones_like(v) for k, v in params.items()})
        assert (opt._flat is not False) == flat
        assert np.all(params["a"] < 1.0) and np.all(params["b"] < 1.0)
