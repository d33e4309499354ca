"""朴素的 PyTorch 参考实现，每一步都记下自己读写了多少元素。

课程页面：docs/triton/fused-softmax.md。朴素 softmax 的五步合计
读 5MN + 2M 个元素、写 3MN + 2M 个元素；融合内核只读 MN、写 MN。
这里的计数不是抄来的公式：每一步按它实际读写的张量的元素数记账。
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .checks import check_matrix


@dataclass
class Step:
    code: str
    elements_read: int
    elements_written: int


@dataclass
class Traffic:
    """一次计算的访存账本：每一步读写的元素数。"""

    element_size: int = 4
    steps: list[Step] = field(default_factory=list)

    def record(self, code: str, reads, writes):
        self.steps.append(Step(code, sum(t.numel() for t in reads), sum(t.numel() for t in writes)))

    @property
    def elements_read(self) -> int:
        return sum(s.elements_read for s in self.steps)

    @property
    def elements_written(self) -> int:
        return sum(s.elements_written for s in self.steps)

    @property
    def bytes_read(self) -> int:
        return self.elements_read * self.element_size

    @property
    def bytes_written(self) -> int:
        return self.elements_written * self.element_size

    def __str__(self) -> str:
        rows = [("步骤", "读(元素)", "写(元素)")]
        rows += [(s.code, f"{s.elements_read:,}", f"{s.elements_written:,}") for s in self.steps]
        rows.append(("合计", f"{self.elements_read:,}", f"{self.elements_written:,}"))
        from .textcols import table

        return table(rows, right=(1, 2))



# --8<-- [start:naive_softmax]
def naive_softmax(x: torch.Tensor, traffic: Traffic | None = None) -> torch.Tensor:
    """逐行 softmax，五个独立的 torch 运算，每个都把中间结果写回内存。"""
    check_matrix(x, "x")
    t = traffic if traffic is not None else Traffic(element_size=x.element_size())
    x_max = x.max(dim=1).values                  # 读 MN，写 M
    t.record("x_max = x.max(dim=1)", [x], [x_max])
    z = x - x_max[:, None]                       # 读 MN + M，写 MN
    t.record("z = x - x_max[:, None]", [x, x_max], [z])
    numerator = torch.exp(z)                     # 读 MN，写 MN
    t.record("numerator = exp(z)", [z], [numerator])
    denominator = numerator.sum(dim=1)           # 读 MN，写 M
    t.record("denominator = numerator.sum(dim=1)", [numerator], [denominator])
    out = numerator / denominator[:, None]       # 读 MN + M，写 MN
    t.record("out = numerator / denominator[:, None]", [numerator, denominator], [out])
    return out
# --8<-- [end:naive_softmax]


def naive_softmax_traffic(x: torch.Tensor) -> Traffic:
    """运行 naive_softmax 并返回它的访存账本。"""
    traffic = Traffic(element_size=x.element_size())
    naive_softmax(x, traffic)
    return traffic


def naive_row_sum(x: torch.Tensor) -> torch.Tensor:
    """行求和的参考：float64 累加（比被测内核精度高）。"""
    check_matrix(x, "x")
    return x.double().sum(dim=1)
