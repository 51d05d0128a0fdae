"""Text capping (toolkit/logs/textcap.py) of every text cell."""

from __future__ import annotations

import pandas as pd


def test_clip_frame_caps_every_text_cell():
    from toolkit.logs.textcap import clip_frame

    df = pd.DataFrame({"a": ["y" * 2001, "ok", None], "n": [1.5, 2.0, 3.0],
                       "o": pd.Series([7, "z" * 2000, "w" * 5000], dtype=object)})
    out, n = clip_frame(df)
    assert n == 2 and out["a"].iloc[0] == "y" * 2000 + " … [truncated: 2,001 characters]"
    assert out["o"].iloc[1] == "z" * 2000 and out["o"].iloc[2].endswith("[truncated: 5,000 characters]")
    assert out["o"].iloc[0] == 7 and out["n"].tolist() == [1.5, 2.0, 3.0] and len(df["a"].iloc[0]) == 2001
    assert clip_frame(df.iloc[1:2][["n"]])[1] == 0
