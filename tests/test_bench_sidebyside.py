"""reduction_lab.bench.sidebyside：tune 脚本共用的并排比较（解析形状；GPU 上的比对与计时由脚本在 GPU 上运行）。"""

from __future__ import annotations

import pytest

from reduction_lab.bench.sidebyside import METHOD, parse_shapes


def test_parse_shapes():
    assert parse_shapes("256x262144:float32,64x1048576:bfloat16") == [(256, 262144, "float32"),
                                                                     (64, 1048576, "bfloat16")]
    with pytest.raises(ValueError):
        parse_shapes("256x262144")          # 缺 dtype
    assert "interleaved" in METHOD and "4x L2" in METHOD
