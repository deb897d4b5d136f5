"""scripts/cuda_parity.py on CPU (``--device cpu``): healthy mechanisms come out ok with finite errors, and the
checks fail when they should: a perturbed tensor is a MISMATCH, a device-side forward that drifts or peeks at the
future is reported with exit code 1 (the CPU float32 floor, built plain, stays correct), and one that raises is
recorded while the rest run; the reference is built with the fast paths off."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest
import torch

from oscrepro.attention.softmax import SoftmaxAttention

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def parity():
    spec = importlib.util.spec_from_file_location("cuda_parity", ROOT / "scripts" / "cuda_parity.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["cuda_parity"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("cuda_parity", None)


def rows(report: str) -> dict[str, list[str]]:
    """Table rows of the markdown report by config name: the cells after the name."""
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in report.splitlines() if line.startswith("| ")]
    return {r[0]: r[1:] for r in cells[1:]}  # cells[0] is the header


def test_healthy_mechanisms_are_ok(parity, tmp_path):
    out = tmp_path / "p.md"
    assert parity.main(["--device", "cpu", "--only", "softmax", "fqo", "--out", str(out)]) == 0
    report = out.read_text()
    assert "- device: CPU" in report and f"torch {torch.__version__}" in report
    table = rows(report)
    assert set(table) == {"softmax", "fqo"}
    for name, (_target, fwd, grad, leak, bf16, det, status) in table.items():
        assert status == "ok", (name, status)
        assert all(math.isfinite(float(v.split()[0])) for v in (fwd, grad, bf16))
        assert float(fwd.split()[0]) <= parity.TOL_FWD and leak == "0" and det == "yes"
    assert table["softmax"][0] == "SoftmaxAttention"


def test_perturbed_tensor_is_a_mismatch(parity):
    ref = torch.randn(4, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert parity.verdict(parity.rel_err(ref.float(), ref), parity.TOL_FWD) == "ok"
    bumped = ref.clone()
    bumped[1, 2] += 1e-2 * ref.abs().max()
    assert parity.verdict(parity.rel_err(bumped, ref), parity.TOL_FWD) == "MISMATCH"
    assert parity.verdict(float("nan"), parity.TOL_FWD) == "MISMATCH"


def test_analytically_zero_gradient_is_scaled_by_the_others(parity):
    ref = {"out": torch.ones(1), "x": torch.full((3,), 10.0), "b": torch.zeros(3)}
    noisy = {"out": torch.ones(1), "x": torch.full((3,), 10.0), "b": torch.full((3,), 1e-8)}
    assert parity.grad_err(noisy, ref)[0] < 1e-5  # float32 noise over a zero gradient
    wrong = dict(noisy, b=torch.full((3,), 1.0))
    assert parity.grad_err(wrong, ref) == (pytest.approx(100.0), "b")


def _patched_forward(monkeypatch, change, parity):
    """SoftmaxAttention with ``change(x, y)`` applied to the device-side model's output only (the one built
    without ``plain``: the float64 reference and the CPU float32 floor are built plain)."""
    original, original_build = SoftmaxAttention.forward, parity.build

    def forward(self, x, **kw):
        y, aux = original(self, x, **kw)
        return (change(x, y) if getattr(self, "broken", False) else y), aux

    def build(path, d_model, n_heads, seed, plain=False, seq=0):
        mech = original_build(path, d_model, n_heads, seed, plain, seq)
        mech.broken = not plain
        return mech

    monkeypatch.setattr(SoftmaxAttention, "forward", forward)
    monkeypatch.setattr(parity, "build", build)


@pytest.mark.parametrize(
    "change, failed",
    [(lambda x, y: y * (1 + 1e-3), "fwd"), (lambda x, y: y + 1e-3 * x.mean(dim=1, keepdim=True), "causal leak")],
    ids=["drift", "future"],
)
def test_broken_device_path_fails_the_run(parity, monkeypatch, change, failed):
    _patched_forward(monkeypatch, change, parity)
    (row,) = [parity.check(ROOT / "conf" / "attention" / "softmax.yaml", torch.device("cpu"), 16, 2, 8)]
    assert row["status"].startswith("MISMATCH") and failed in row["status"]
    assert parity.main(["--device", "cpu", "--only", "softmax", "--seq", "8", "--d-model", "16"]) == 1


def test_raising_mechanism_is_recorded(parity, monkeypatch, capsys):
    def boom(x, y):
        raise RuntimeError("no kernel for this device")

    _patched_forward(monkeypatch, boom, parity)
    assert parity.main(["--device", "cpu", "--only", "softmax", "gqa", "--seq", "8", "--d-model", "16"]) == 1
    table = rows(capsys.readouterr().out)
    assert table["softmax"][-1] == "error (float32): RuntimeError: no kernel for this device"
    assert table["gqa"][-1] == "ok"


def test_reference_runs_the_plain_path(parity):
    """The float64 reference switches fqo's tiled kernel and its compile off; the device model keeps the config's."""
    fqo = ROOT / "conf" / "attention" / "fqo.yaml"
    plain, fast = parity.build(fqo, 16, 2, 0, plain=True), parity.build(fqo, 16, 2, 0)
    assert plain.tiled is False and plain.compile_min_elems is None
    assert fast.tiled is None and fast.compile_min_elems is not None
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), fast.state_dict().values(), strict=True))
