"""GSPO, GMPO, SAPO, CISPO, REINFORCE, Clip-Cov and KL-Cov.

Each loss is checked three ways: hand-computed small examples; equality (values and autograd
gradients) with an independent loop-based transcription of the reference implementation
(verl ``core_algos.py``, with verl's own aggregation) on random inputs; and invariants
(GSPO on one-token responses is PPO-clip, GMPO with equal token ratios is PPO-clip, CISPO /
REINFORCE / SAPO on-policy give the plain policy gradient ``-A grad(logp)``).
"""

from __future__ import annotations

import math

import pytest
import torch
from pydantic import ValidationError

import grove.core  # noqa: F401  (registration)
from grove.core.aggregation import AggregationScale, seq_mean_token_mean, token_mean
from grove.core.losses import PolicyLossInput
from grove.core.losses.covariance import ClipCovParams, KLCovParams
from grove.core.losses.ppo_clip import PPOClipParams, ppo_clip
from grove.core.losses.sequence_ratio import GMPOParams, GSPOParams, gmpo, gspo
from grove.core.losses.weighted import CISPOParams, SAPOParams, cispo, reinforce, sapo
from grove.registry import POLICY_LOSSES, NoParams
from grove.resolve import load_config

F64 = torch.float64
NEW_LOSSES = ["gspo", "gmpo", "sapo", "cispo", "reinforce", "clip_cov", "kl_cov"]


def t(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=F64)


def random_inputs(seed: int, n: int = 5, r: int = 7, scale: float = 0.4, token_adv: bool = False):
    """``logp`` (leaf), ``old``, ``adv`` (sequence-level unless ``token_adv``), ``mask`` (>= 1 token/row)."""
    g = torch.Generator().manual_seed(seed)
    old = -3.0 * torch.rand(n, r, generator=g, dtype=F64)
    logp = (old + scale * torch.randn(n, r, generator=g, dtype=F64)).requires_grad_(True)
    if token_adv:
        adv = torch.randn(n, r, generator=g, dtype=F64)
    else:
        adv = torch.randn(n, 1, generator=g, dtype=F64).expand(n, r).clone()
    lengths = torch.randint(1, r + 1, (n,), generator=g)
    mask = (torch.arange(r)[None, :] < lengths[:, None]).to(F64)
    return logp, old, adv, mask


def aggregate(name: str, token_loss: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    fn = {"seq_mean_token_mean": seq_mean_token_mean, "token_mean": token_mean}[name]
    return fn(token_loss, mask, AggregationScale.from_mask(mask))


def leaf(x: torch.Tensor) -> torch.Tensor:
    return x.detach().clone().requires_grad_(True)


def compare_with_reference(ours_fn, ref_fn, logp, aggregation: str, **kw):
    """Our loss (aggregated by the trainer's aggregation) vs the reference scalar: value and gradient."""
    a, b = leaf(logp), leaf(logp)
    ours = aggregate(aggregation, ours_fn(a).token_loss, kw["mask"])
    ref = ref_fn(b)
    ours.backward()
    ref.backward()
    torch.testing.assert_close(ours, ref)
    torch.testing.assert_close(a.grad, b.grad)


# --------------------------------------------------------------------------- loop-based references
# Transcriptions of verl's semantics, token by token, written independently of the vectorised code.


def verl_seq_mean_token_mean(rows: list[list[torch.Tensor]], mask: torch.Tensor) -> torch.Tensor:
    seq_losses = []
    for i, row in enumerate(rows):
        n = float(mask[i].sum())
        if n > 0:
            seq_losses.append(
                sum((row[j] * mask[i, j] for j in range(len(row))), torch.zeros((), dtype=F64)) / (n + 1e-8)
            )
    return sum(seq_losses, torch.zeros((), dtype=F64)) / len(seq_losses)


def verl_token_mean(rows: list[list[torch.Tensor]], mask: torch.Tensor) -> torch.Tensor:
    total = torch.zeros((), dtype=F64)
    for i, row in enumerate(rows):
        for j, x in enumerate(row):
            total = total + x * mask[i, j]
    return total / mask.sum()


def ref_gspo(logp, old, adv, mask, lo, hi):
    rows = []
    for i in range(logp.shape[0]):
        n = max(float(mask[i].sum()), 1.0)
        seq = (
            sum(
                ((logp[i, j] - old[i, j]) * mask[i, j] for j in range(logp.shape[1])),
                torch.zeros((), dtype=F64),
            )
            / n
        )
        row = []
        for j in range(logp.shape[1]):
            log_s = logp[i, j] - logp[i, j].detach() + seq.detach()
            s = torch.exp(torch.clamp(log_s, max=10.0))
            row.append(torch.maximum(-adv[i, j] * s, -adv[i, j] * torch.clamp(s, 1 - lo, 1 + hi)))
        rows.append(row)
    return verl_seq_mean_token_mean(rows, mask)


def ref_gmpo(logp, old, adv, mask, lo, hi):
    losses = []
    for i in range(logp.shape[0]):
        n = float(mask[i].sum())
        clipped_sum = torch.zeros((), dtype=F64)
        adv_sum = torch.zeros((), dtype=F64)
        for j in range(logp.shape[1]):
            lr = logp[i, j] - old[i, j]
            sgn = torch.sign(adv[i, j])
            lm = sgn * torch.minimum(sgn * lr, sgn * torch.clamp(lr, -lo, hi))
            clipped_sum = clipped_sum + lm * mask[i, j]
            adv_sum = adv_sum + adv[i, j] * mask[i, j]
        losses.append(-(adv_sum / (n + 1e-8)) * torch.exp(clipped_sum / (n + 1e-8)))
    return sum(losses, torch.zeros((), dtype=F64)) / len(losses)


def ref_sapo(logp, old, adv, mask, tau_pos, tau_neg):
    rows = []
    for i in range(logp.shape[0]):
        row = []
        for j in range(logp.shape[1]):
            r = torch.exp(torch.clamp(logp[i, j] - old[i, j], -20.0, 20.0))
            tau = tau_pos if float(adv[i, j]) > 0 else tau_neg
            row.append(-(torch.sigmoid(tau * (r - 1.0)) * 4.0 / tau) * adv[i, j])
        rows.append(row)
    return verl_seq_mean_token_mean(rows, mask)


def ref_cispo_rows(logp, old, adv, lo, hi):
    rows = []
    for i in range(logp.shape[0]):
        row = []
        for j in range(logp.shape[1]):
            r = torch.exp(torch.clamp(logp[i, j] - old[i, j], -20.0, 20.0))
            w = torch.clamp(r, 1 - lo, 1 + hi).detach()
            row.append(-w * adv[i, j] * logp[i, j])
        rows.append(row)
    return rows


# --------------------------------------------------------------------------- registration and params


@pytest.mark.parametrize("name", NEW_LOSSES)
def test_registered_with_paper_and_forbidding_params(name):
    entry = POLICY_LOSSES.entry(name)
    assert entry.paper and entry.summary
    assert entry.params.model_config.get("extra") == "forbid"
    assert entry.params.model_config.get("frozen") is True
    with pytest.raises(ValidationError):
        POLICY_LOSSES.validate_params(name, {"no_such_knob": 1})


def test_param_defaults_and_validation():
    assert (GSPOParams().clip_low, GSPOParams().clip_high) == (3e-4, 4e-4)
    assert (GMPOParams().clip_low, GMPOParams().clip_high) == (0.4, 0.4)
    assert (SAPOParams().tau_pos, SAPOParams().tau_neg) == (1.0, 1.05)
    assert (CISPOParams().clip_low, CISPOParams().clip_high) == (None, 4.0)
    assert ClipCovParams().clip_cov_ratio == 2e-4 and KLCovParams().kl_cov_ratio == 2e-4
    with pytest.raises(ValidationError):
        SAPOParams(tau_pos=0.0)
    with pytest.raises(ValidationError):
        ClipCovParams(clip_cov_lb=5.0, clip_cov_ub=1.0)
    with pytest.raises(ValidationError):
        KLCovParams(kl_cov_ratio=0.0)
    with pytest.raises(ValidationError):
        GSPOParams(clip_low=1.0)
    assert POLICY_LOSSES.entry("reinforce").params is NoParams


CONFIG_SNIPPETS = {
    "gspo": "{id: gspo, clip_low: 3.0e-4, clip_high: 4.0e-4}",
    "gmpo": "{id: gmpo, clip_low: 0.4, clip_high: 0.4}",
    "sapo": "{id: sapo, tau_pos: 1.0, tau_neg: 1.05}",
    "cispo": "{id: cispo, clip_low: null, clip_high: 4.0}",
    "reinforce": "{id: reinforce}",
    "clip_cov": "{id: clip_cov, clip_low: 0.2, clip_high: 0.2, clip_cov_ratio: 2.0e-4, clip_cov_lb: 1.0, clip_cov_ub: 5.0}",
    "kl_cov": "{id: kl_cov, kl_cov_ratio: 2.0e-4, ppo_kl_coef: 1.0}",
}


@pytest.mark.parametrize("name", NEW_LOSSES)
def test_documented_config_snippet_loads(tmp_path, name):
    path = tmp_path / "c.yaml"
    path.write_text(
        f"algorithm:\n  policy_loss: {CONFIG_SNIPPETS[name]}\n  aggregation: seq_mean_token_mean\n"
    )
    cfg = load_config(path)
    assert cfg.algorithm.policy_loss.id == name
    cfg.algorithm.policy_loss.validated(POLICY_LOSSES)


@pytest.mark.parametrize("name", NEW_LOSSES)
def test_zero_outside_mask_and_float_stats(name):
    logp, old, adv, mask = random_inputs(0, token_adv=True)
    with torch.no_grad():
        logp_pad = torch.where(mask.bool(), logp, torch.full_like(logp, 50.0))  # garbage in padding
    entry = POLICY_LOSSES.entry(name)
    out = entry.fn(PolicyLossInput(logp_pad, old, adv, mask), entry.params())
    assert out.token_loss.shape == logp.shape
    assert torch.isfinite(out.token_loss).all()
    assert (out.token_loss[mask == 0] == 0).all()
    for key, v in out.token_stats.items():
        assert v.dtype == F64 and v.shape == logp.shape and not v.requires_grad, key
        assert (v[mask == 0] == 0).all(), key


# --------------------------------------------------------------------------- GSPO


def test_gspo_hand_cases():
    logp = t([[-1.0, -2.0, -3.0], [-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]]).requires_grad_(True)
    old = logp.detach() - t([[0.2, -0.1, 5.0], [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]])
    adv = t([[1.0] * 3, [-1.0] * 3, [1.0] * 3])
    mask = t([[1, 1, 0], [1, 1, 1], [1, 1, 1]])
    out = gspo(PolicyLossInput(logp, old, adv, mask), GSPOParams(clip_low=0.2, clip_high=0.2))
    s0, s1 = math.exp(0.05), math.exp(0.5)  # row 0: mean(0.2, -0.1); the padded 5.0 is ignored
    # row 0 inside [0.8, 1.2]: -s0; row 1 A<0 with s > 1.2 is not clipped: +s1; row 2 clipped: -1.2
    expected = [[-s0, -s0, 0.0], [s1, s1, s1], [-1.2, -1.2, -1.2]]
    torch.testing.assert_close(out.token_loss, t(expected))
    torch.testing.assert_close(out.token_stats["ratio"], t([[s0, s0, 0.0], [s1] * 3, [s1] * 3]))
    assert out.token_stats["clip_high"].tolist() == [[0, 0, 0], [0, 0, 0], [1, 1, 1]]
    assert out.token_stats["clip_low"].sum() == 0
    # each token's loss depends on its own logp only, with slope -A * s_i; clipped tokens: 0
    out.token_loss.sum().backward()
    torch.testing.assert_close(logp.grad, t([[-s0, -s0, 0.0], [s1, s1, s1], [0.0, 0.0, 0.0]]))


def test_gspo_tiny_default_clip_range_clips_a_five_percent_ratio():
    logp = t([[-1.0, -1.0]]).requires_grad_(True)
    out = gspo(PolicyLossInput(logp, logp.detach() - 0.05, t([[2.0, 2.0]]), t([[1, 1]])), GSPOParams())
    torch.testing.assert_close(out.token_loss, t([[-2.0008, -2.0008]]))  # -A * (1 + 4e-4)
    out.token_loss.sum().backward()
    assert (logp.grad == 0).all()


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("lo", "hi"), [(0.2, 0.28), (3e-4, 4e-4)])
def test_gspo_equals_verl_reference(seed, lo, hi):
    logp, old, adv, mask = random_inputs(seed, token_adv=seed % 2 == 1)
    params = GSPOParams(clip_low=lo, clip_high=hi)
    compare_with_reference(
        lambda x: gspo(PolicyLossInput(x, old, adv, mask), params),
        lambda x: ref_gspo(x, old, adv, mask, lo, hi),
        logp,
        "seq_mean_token_mean",
        mask=mask,
    )


def test_gspo_log_ratio_is_clamped_at_ten_as_verl():
    logp = t([[0.0, 0.0]]).requires_grad_(True)
    out = gspo(PolicyLossInput(logp, logp.detach() - 12.0, t([[-1.0, -1.0]]), t([[1, 1]])), GSPOParams())
    torch.testing.assert_close(out.token_loss, t([[math.exp(10.0)] * 2]))
    out.token_loss.sum().backward()
    assert (logp.grad == 0).all()  # beyond the clamp: no gradient


@pytest.mark.parametrize("seed", range(3))
def test_gspo_one_token_responses_equal_ppo_clip(seed):
    g = torch.Generator().manual_seed(seed)
    n, r = 6, 4
    old = -2.0 * torch.rand(n, r, generator=g, dtype=F64)
    logp = old + 0.5 * torch.randn(n, r, generator=g, dtype=F64)
    adv = torch.randn(n, r, generator=g, dtype=F64)
    mask = torch.zeros(n, r, dtype=F64)
    mask[torch.arange(n), torch.randint(0, r, (n,), generator=g)] = 1.0  # one loss token per row
    for width in (r, 1):
        sl = slice(0, width)
        m = mask[:, sl] if width == r else torch.ones(n, 1, dtype=F64)
        a, b = leaf(logp[:, sl]), leaf(logp[:, sl])
        ours = gspo(PolicyLossInput(a, old[:, sl], adv[:, sl], m), GSPOParams(clip_low=0.2, clip_high=0.28))
        ppo = ppo_clip(PolicyLossInput(b, old[:, sl], adv[:, sl], m), PPOClipParams(clip_low=0.2, clip_high=0.28))
        torch.testing.assert_close(ours.token_loss, ppo.token_loss)
        for key in ("ratio", "clip_low", "clip_high", "clip"):
            torch.testing.assert_close(ours.token_stats[key], ppo.token_stats[key])
        ours.token_loss.sum().backward()
        ppo.token_loss.sum().backward()
        torch.testing.assert_close(a.grad, b.grad)


# --------------------------------------------------------------------------- GMPO


def test_gmpo_hand_cases():
    logp = t([[-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]]).requires_grad_(True)
    old = logp.detach() - t([[0.6, -0.6, 0.1], [0.6, -0.6, 0.1]])
    adv = t([[1.0] * 3, [-1.0] * 3])
    mask = t([[1, 1, 1], [1, 1, 1]])
    out = gmpo(PolicyLossInput(logp, old, adv, mask), GMPOParams(clip_low=0.4, clip_high=0.4))
    # A > 0: clipped log ratios min(l, clamp(l)) = [0.4, -0.6, 0.1], mean -1/30
    # A < 0: max(l, clamp(l)) = [0.6, -0.4, 0.1], mean 0.1
    r0, r1 = math.exp(-1.0 / 30.0), math.exp(0.1)
    torch.testing.assert_close(out.token_loss, t([[-r0] * 3, [r1] * 3]))
    torch.testing.assert_close(out.token_stats["ratio"], t([[r0] * 3, [r1] * 3]))
    assert out.token_stats["clip_high"].tolist() == [[1, 0, 0], [0, 0, 0]]
    assert out.token_stats["clip_low"].tolist() == [[0, 0, 0], [0, 1, 0]]
    loss = aggregate("seq_mean_token_mean", out.token_loss, mask)
    torch.testing.assert_close(loss, t((-r0 + r1) / 2))
    loss.backward()
    # d/dl_t of -Abar r_i / 2 (two sequences) = -A r_i / (2 n) on unclipped tokens, 0 on clipped ones
    g0, g1 = -r0 / 6.0, r1 / 6.0
    torch.testing.assert_close(logp.grad, t([[0.0, g0, g0], [g1, 0.0, g1]]))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("lo", "hi"), [(0.4, 0.4), (0.1, 0.3)])
def test_gmpo_equals_verl_reference(seed, lo, hi):
    logp, old, adv, mask = random_inputs(seed, scale=0.6, token_adv=seed % 2 == 1)
    params = GMPOParams(clip_low=lo, clip_high=hi)
    compare_with_reference(
        lambda x: gmpo(PolicyLossInput(x, old, adv, mask), params),
        lambda x: ref_gmpo(x, old, adv, mask, lo, hi),
        logp,
        "seq_mean_token_mean",
        mask=mask,
    )


@pytest.mark.parametrize("seed", range(3))
def test_gmpo_equal_token_ratios_equal_ppo_clip(seed):
    g = torch.Generator().manual_seed(seed)
    n, r, lo, hi = 6, 5, 0.3, 0.2
    seq_log_ratio = 0.7 * torch.randn(n, 1, generator=g, dtype=F64)
    logp = -2.0 * torch.rand(n, r, generator=g, dtype=F64)
    old = logp - seq_log_ratio  # every token of a sequence has the same ratio
    adv = torch.randn(n, 1, generator=g, dtype=F64).expand(n, r).clone()
    mask = (torch.arange(r)[None, :] < torch.randint(1, r + 1, (n, 1), generator=g)).to(F64)
    # GMPO clips the log ratio to [-lo, hi]: PPO's ratio range [e^-lo, e^hi]
    ppo_params = PPOClipParams(clip_low=1.0 - math.exp(-lo), clip_high=math.exp(hi) - 1.0)
    a, b = leaf(logp), leaf(logp)
    ours = aggregate(
        "seq_mean_token_mean", gmpo(PolicyLossInput(a, old, adv, mask), GMPOParams(clip_low=lo, clip_high=hi)).token_loss, mask
    )
    ppo = aggregate("seq_mean_token_mean", ppo_clip(PolicyLossInput(b, old, adv, mask), ppo_params).token_loss, mask)
    torch.testing.assert_close(ours, ppo)
    ours.backward()
    ppo.backward()
    torch.testing.assert_close(a.grad, b.grad)


# --------------------------------------------------------------------------- SAPO


def test_sapo_hand_cases():
    logp = t([[-1.0, -1.0, -1.0, -1.0]]).requires_grad_(True)
    old = logp.detach() - t([[0.0, 0.0, 0.5, 0.5]])
    adv = t([[1.0, -1.0, 2.0, -2.0]])
    out = sapo(PolicyLossInput(logp, old, adv, t([[1, 1, 1, 1]])), SAPOParams(tau_pos=1.0, tau_neg=1.05))
    r = math.exp(0.5)

    def sig(x):
        return 1.0 / (1.0 + math.exp(-x))

    # on-policy the gate is sigmoid(0) * 4 / tau = 2 / tau
    gate_pos, gate_neg = sig(r - 1.0) * 4.0, sig(1.05 * (r - 1.0)) * 4.0 / 1.05
    expected = [-2.0, 2.0 / 1.05, -2.0 * gate_pos, 2.0 * gate_neg]
    torch.testing.assert_close(out.token_loss, t([expected]))
    w_pos = 4 * sig(r - 1.0) * (1 - sig(r - 1.0))
    w_neg = 4 * sig(1.05 * (r - 1.0)) * (1 - sig(1.05 * (r - 1.0)))
    torch.testing.assert_close(out.token_stats["gate_weight"], t([[1.0, 1.0, w_pos, w_neg]]))
    out.token_loss.sum().backward()
    # d gate / d logp = 4 sigma (1 - sigma) * r: 1 on-policy
    torch.testing.assert_close(logp.grad, t([[-1.0, 1.0, -2.0 * w_pos * r, 2.0 * w_neg * r]]))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("tau_pos", "tau_neg"), [(1.0, 1.05), (0.5, 2.0)])
def test_sapo_equals_verl_reference(seed, tau_pos, tau_neg):
    logp, old, adv, mask = random_inputs(seed, scale=0.8, token_adv=seed % 2 == 1)
    params = SAPOParams(tau_pos=tau_pos, tau_neg=tau_neg)
    compare_with_reference(
        lambda x: sapo(PolicyLossInput(x, old, adv, mask), params),
        lambda x: ref_sapo(x, old, adv, mask, tau_pos, tau_neg),
        logp,
        "seq_mean_token_mean",
        mask=mask,
    )


# --------------------------------------------------------------------------- CISPO and REINFORCE


def test_cispo_hand_cases():
    logp = t([[-1.0, -2.0, -0.5]]).requires_grad_(True)
    old = logp.detach() - t([[0.5, -0.5, 0.0]])
    adv = t([[1.0, -1.0, 2.0]])
    mask = t([[1, 1, 1]])
    w = math.exp(-0.5)
    out = cispo(PolicyLossInput(logp, old, adv, mask), CISPOParams(clip_low=None, clip_high=0.2))
    # weights [min(e^.5, 1.2), e^-.5 (no lower bound), 1]; loss -w A logp
    torch.testing.assert_close(out.token_loss, t([[1.2, -2.0 * w, 1.0]]))
    assert out.token_stats["clip_high"].tolist() == [[1, 0, 0]]
    assert out.token_stats["clip_low"].sum() == 0
    out.token_loss.sum().backward()
    torch.testing.assert_close(logp.grad, t([[-1.2, w, -2.0]]))  # clipped tokens keep a gradient

    logp.grad = None
    out = cispo(PolicyLossInput(logp, old, adv, mask), CISPOParams(clip_low=0.2, clip_high=0.2))
    torch.testing.assert_close(out.token_loss, t([[1.2, -1.6, 1.0]]))
    assert out.token_stats["clip"].tolist() == [[1, 1, 0]]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("lo", "hi"), [(0.2, 0.2), (None, 4.0), (1.0, 0.28)])
def test_cispo_equals_verl_reference(seed, lo, hi):
    logp, old, adv, mask = random_inputs(seed, scale=0.8, token_adv=seed % 2 == 1)
    params = CISPOParams(clip_low=lo, clip_high=hi)
    ref_lo = float("inf") if lo is None else lo  # "no lower bound" = verl with an infinite clip_ratio_low
    compare_with_reference(
        lambda x: cispo(PolicyLossInput(x, old, adv, mask), params),
        lambda x: verl_token_mean(ref_cispo_rows(x, old, adv, ref_lo, hi), mask),
        logp,
        "token_mean",
        mask=mask,
    )


def test_reinforce_hand_case_and_reference():
    logp = t([[-1.0, -2.0, -0.5]]).requires_grad_(True)
    out = reinforce(PolicyLossInput(logp, logp.detach() + 0.3, t([[1.0, -1.0, 2.0]]), t([[1, 1, 0]])), NoParams())
    torch.testing.assert_close(out.token_loss, t([[1.0, -2.0, 0.0]]))
    torch.testing.assert_close(out.token_stats["ratio"], t([[math.exp(-0.3), math.exp(-0.3), 0.0]]))
    out.token_loss.sum().backward()
    torch.testing.assert_close(logp.grad, t([[-1.0, 1.0, 0.0]]))

    logp, old, adv, mask = random_inputs(3, token_adv=True)
    compare_with_reference(
        lambda x: reinforce(PolicyLossInput(x, old, adv, mask), NoParams()),
        lambda x: verl_token_mean(
            [[-x[i, j] * adv[i, j] for j in range(x.shape[1])] for i in range(x.shape[0])], mask
        ),
        logp,
        "token_mean",
        mask=mask,
    )


@pytest.mark.parametrize(
    ("fn", "params"),
    [
        (cispo, CISPOParams(clip_low=0.1, clip_high=0.1)),
        (cispo, CISPOParams()),
        (reinforce, NoParams()),
        (sapo, SAPOParams(tau_pos=0.7, tau_neg=1.3)),
    ],
)
@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_mean"])
def test_ratio_one_gives_plain_policy_gradient(fn, params, aggregation):
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 7, dtype=F64, requires_grad=True)
    tokens = torch.randint(0, 7, (3, 5))
    logp = logits.log_softmax(-1).gather(-1, tokens[..., None]).squeeze(-1)
    adv = torch.randn(3, 5, dtype=F64)
    mask = t([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [0, 1, 1, 1, 0]])
    loss = aggregate(aggregation, fn(PolicyLossInput(logp, logp.detach(), adv, mask), params).token_loss, mask)
    (grad,) = torch.autograd.grad(loss, logits, retain_graph=True)
    plain = aggregate(aggregation, -adv * logp, mask)
    (expected,) = torch.autograd.grad(plain, logits)
    torch.testing.assert_close(grad, expected)
