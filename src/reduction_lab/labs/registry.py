"""实验的登记表：名字 -> 实验。新增一个实验就在这里加一行。"""

from __future__ import annotations

from .bank_conflicts import BankConflicts
from .cluster_reduce_cuda import ClusterReduceCuda
from .col_sum_triton import ColSumTriton
from .core import Lab
from .full_sum_cuda import FullSumCuda
from .grid_sum_cuda import GridSumCuda
from .layer_norm_triton import LayerNormTriton
from .online_softmax import OnlineSoftmax
from .ordered_sum_cuda import OrderedSumCuda
from .reduce_sum_cuda import ReduceSumCuda
from .reduce_sum_tilelang import ReduceSumTileLang
from .rms_norm_triton import RmsNormTriton
from .softmax_cuda import SoftmaxCuda
from .softmax_tilelang import SoftmaxTileLang
from .softmax_rows_triton import SoftmaxRowsTriton
from .softmax_triton import SoftmaxTriton
from .vector_loads_cuda import VectorLoadsCuda
from .warp_reduce_cuda import WarpReduceCuda

#: 按讲义的顺序
LABS: dict[str, Lab] = {lab.name: lab for lab in (
    SoftmaxTriton(),
    SoftmaxRowsTriton(),
    OnlineSoftmax(),
    RmsNormTriton(),
    LayerNormTriton(),
    ColSumTriton(),
    ReduceSumCuda(),
    WarpReduceCuda(),
    VectorLoadsCuda(),
    FullSumCuda(),
    GridSumCuda(),
    OrderedSumCuda(),
    SoftmaxCuda(),
    ClusterReduceCuda(),
    BankConflicts(),
    ReduceSumTileLang(),
    SoftmaxTileLang(),
)}
