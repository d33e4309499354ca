"""朴素 softmax 的访存账本：读 5MN+2M，写 3MN+2M。"""

import pytest
import torch

import reduction_lab as rl


@pytest.mark.parametrize("m,n", [(1, 1), (300, 781), (4, 1000)])
def test_naive_softmax_traffic_formula(m, n):
    x = torch.randn(m, n)
    t = rl.naive_softmax_traffic(x)
    assert t.elements_read == 5 * m * n + 2 * m
    assert t.elements_written == 3 * m * n + 2 * m
    assert t.bytes_read == 4 * t.elements_read
    assert len(t.steps) == 5


def test_naive_softmax_is_softmax():
    x = torch.randn(5, 37) * 10
    torch.testing.assert_close(rl.naive_softmax(x), torch.softmax(x, 1))


def test_traffic_table_mentions_every_step():
    text = str(rl.naive_softmax_traffic(torch.randn(2, 3)))
    assert "x.max(dim=1)" in text and "合计" in text
