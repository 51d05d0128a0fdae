"""toolkit.report.assets: the plotly.js bundle is copied byte for byte beside the pages, once, and a path that
is not a regular file is left alone."""

from __future__ import annotations

import os

from toolkit.report import assets


def test_the_bundle_is_plotlys_own_file_written_once(tmp_path):
    assert assets.write_plotly(tmp_path) == "plotly.min.js"
    dest = tmp_path / "plotly.min.js"
    assert dest.read_bytes() == assets.plotly_bundle().read_bytes()
    before = dest.stat().st_mtime_ns
    os.utime(dest, ns=(before - 10**9, before - 10**9))
    assets.write_plotly(tmp_path)
    assert dest.stat().st_mtime_ns == before - 10**9  # same size: not written again
    assert [p.name for p in tmp_path.iterdir()] == ["plotly.min.js"]  # no temporary file left


def test_a_truncated_copy_is_replaced_and_a_folder_left_alone(tmp_path):
    (tmp_path / "plotly.min.js").write_text("truncated")
    assets.write_plotly(tmp_path)
    assert (tmp_path / "plotly.min.js").read_bytes() == assets.plotly_bundle().read_bytes()
    other = tmp_path / "other"
    (other / "plotly.min.js").mkdir(parents=True)
    assert assets.write_plotly(other) == "plotly.min.js" and (other / "plotly.min.js").is_dir()
