"""终端表格的列宽：汉字占两列，表格按显示宽度对齐。"""

from reduction_lab.textcols import columns, pad, table


def test_columns_count_wide_characters_twice():
    assert columns("abc") == 3 and columns("融合softmax") == 11 and columns("（）") == 4


def test_pad_left_and_right():
    assert pad("和", 4) == "和  " and pad("12", 4, right=True) == "  12" and pad("长长的", 2) == "长长的"


def test_table_aligns_by_display_width():
    out = table([("softmax-triton", "Triton：融合"), ("在线softmax", "Q"), ("a", "求和")])
    lines = out.splitlines()
    # 第二列从同一显示列开始
    assert {columns(line[: line.index(c)]) for line, c in zip(lines, ("T", "Q", "求"))} == {16}
    assert table([("步骤", "1"), ("x", "100")], right=(1,)).splitlines() == ["步骤    1", "x     100"]
