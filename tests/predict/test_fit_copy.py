"""predict.fit's calibration copy: a fit writes into per-format dicts, never into its base."""

from __future__ import annotations

from kvtui.simulator.model.fit import FitParam, apply, copy_calibration
from kvtui.simulator.model.roofline import Calibration


def test_copy_is_equal_and_its_dicts_are_its_own():
    base = Calibration(name="base", attn_eff=0.4, fit={"n": 3})
    cal = copy_calibration(base)
    assert cal == base and cal is not base
    assert cal.gemm_eff is not base.gemm_eff and cal.fit is not base.fit


def test_apply_leaves_the_base_untouched():
    base = Calibration()
    before = dict(base.gemm_eff)
    cal = apply(base, [FitParam("gemm_eff", "bf16", 0.1, 0.9, 0.7), FitParam("attn_eff", None, 0.1, 0.9, 0.5)],
                [0.3, 0.2])
    assert cal.gemm_eff["bf16"] == 0.3 and cal.attn_eff == 0.2
    assert base.gemm_eff == before and base.attn_eff == 0.5
