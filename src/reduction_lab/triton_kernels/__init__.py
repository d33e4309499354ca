"""Triton 内核：融合 softmax、分块行求和、在线 softmax、归一化、沿列求和。

每个文件一个思想，对应一讲：

* :mod:`.softmax`——融合 softmax（docs/triton/fused-softmax.md、docs/triton/masking.md）；
* :mod:`.row_sum`——在一个 program 内循环遍历整行的行求和（docs/triton/tiling.md）；
* :mod:`.online_softmax`——超过一个块的长行：在线 softmax（docs/triton/tiling.md）；
* :mod:`.layer_norm`——LayerNorm 与 RMSNorm 的前向、反向与 autograd（docs/triton/normalization.md）；
* :mod:`.col_sum`——沿列求和（docs/triton/column-sum.md）。

函数从子模块导入（``from reduction_lab.triton_kernels.softmax import fused_softmax``），
或用顶层的 ``reduction_lab.fused_softmax`` 等名字。
"""
