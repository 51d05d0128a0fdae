"""Every parser (toolkit/logs/parsers/): non-finite and absurd numbers are malformed, and cut or corrupted
files never raise."""

from __future__ import annotations

import numpy as np
import pytest

from tests.logs.helpers import NON_FINITE_CASES, _fixtures
from toolkit.logs.detect import detect_format
from toolkit.logs.findings import op_summary_findings
from toolkit.profile.optable import OP_SUMMARY_COLUMNS


@pytest.mark.parametrize("fmt", sorted(NON_FINITE_CASES))
def test_non_finite_and_absurd_numbers_are_malformed_in_every_parser(tmp_path, fmt):
    import warnings

    from toolkit.profile.optable import op_statistic

    name, text, bad = NON_FINITE_CASES[fmt]
    path = tmp_path / name
    path.write_text(text)
    det = detect_format(path)
    assert det.parser is not None and det.parser.name == fmt
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a numpy/pandas RuntimeWarning fails the test
        res = det.parser.parse(path)
        stat = op_statistic(res.op_summary)
        op_summary_findings(res.op_summary)
    assert res.malformed == bad
    if fmt == "compile_log":
        assert res.tables["compile_passes"]["Pass"].tolist() == ["ok"] and res.tables["compile_passes"]["Ms"].tolist() == [3.0]
        return
    table = res.tables["op_statistic"] if fmt == "op_statistic_csv" else res.op_summary
    assert table["OP Type"].tolist() == ["Add"]
    nums = table.select_dtypes("number").to_numpy(float)
    assert not np.isinf(nums).any()
    want_us = 3.0
    if fmt == "op_statistic_csv":
        assert table["Total Time(us)"].tolist() == [want_us]
    else:
        assert res.op_summary["Task Duration(us)"].tolist() == [pytest.approx(want_us)]
        assert stat["Total Time(us)"].tolist() == [pytest.approx(want_us)]


def test_parsers_never_raise_on_cut_or_corrupted_files(tmp_path):
    """Every fixture cut at several points or with bytes flipped: parse returns, it never raises."""
    rng = np.random.default_rng(1)
    (tmp_path / "src").mkdir()
    for src in _fixtures(tmp_path / "src"):
        data = src.read_bytes()
        parser = detect_format(src).parser
        for cut in (1, len(data) // 3, len(data) // 2, len(data) - 1):
            for variant in (data[:cut], bytes(b ^ 0x5A if rng.random() < 0.05 else b for b in data[:cut])):
                path = tmp_path / f"cut_{src.name}"
                path.write_bytes(variant)
                res = parser.parse(path)
                assert res.malformed >= 0 and list(res.op_summary.columns) == OP_SUMMARY_COLUMNS
