"""tests/simt：CUDA C 模拟器（reduction_lab.simt）的测试。"""
