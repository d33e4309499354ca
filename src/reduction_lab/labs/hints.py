"""模拟器与编译器的错误 -> 学习者看得懂的诊断（CUDA C 的实验共用）。"""

from __future__ import annotations

import re

from .grading import Hint, error_line, find_line, zh_part

# 模拟器的错误 -> (key, 原因, 怎么改)
_SIMT_HINTS = {
    "FrontendMissingError": (
        "environment", "这台机器缺少模拟器的 C++ 前端（libclang 或 pycparser 没有安装），与你的代码无关",
        "按上面的 pip 命令装上缺的包（pip install reduction-lab 会一起装上），然后重新运行评分程序。"),
    "BarrierDivergenceError": (
        "barrier-divergence", "__syncthreads() 没有被线程块里的所有线程执行到（屏障写在了分支里）",
        "把 __syncthreads() 移到 if (tid < s) 的外面、循环体之内：每一步所有线程都要到达同一个屏障。\n"
        "真实 GPU 上这是未定义行为：可能死锁，也可能悄悄算出（或算错）结果，所以模拟器把它当作错误。"),
    "SharedMemoryRaceError": (
        "shared-race", "共享内存数据竞争：一个线程读了别的线程还没写完（或正要改写）的共享内存",
        "写完 sdata[tid] 之后，以及树形归约的每一步之后，都要 __syncthreads()。"),
    "GlobalMemoryRaceError": (
        "global-race", "全局内存数据竞争：几个线程（常常是不同线程块的）不用原子操作写同一个输出元素，或读了别的线程块正在写的结果",
        "每个输出元素只让一个线程写（例如 if (tid == 0) out[row] = sdata[0];）；几个线程块合写一个元素时两边都用 atomicAdd，"
        "并在启动前把输出清零。\n一次启动之内，不同线程块之间没有任何顺序：要用别的线程块的结果，就放到下一次启动。"),
    "DsmemExitedBlockError": (
        "dsmem-exited", "经分布式共享内存访问了一个可能已经退出的线程块",
        "内核末尾（每个 return 之前）再 cluster.sync() 一次：簇里每一块都等别的块对它共享内存的访问全部完成再退出。\n"
        "真实 GPU 上块退出之后共享内存就被回收，读到的是无效的值，也可能让整个内核出错。"),
    "OutOfBoundsError": (
        "out-of-bounds", "越界访问",
        "检查循环的边界（j < cols，不是 j <= cols）、行偏移 row * cols 和写出的下标 out[row]。"),
    "UninitializedReadError": (
        "uninitialized-read", "读了没有任何线程写过的内存",
        "每个被读的元素之前都要有线程写过：写入和读出的下标范围要一致；只让一部分线程写（if (tid < cols) …）时，"
        "其余的槽位也要写上单位元（求和写 0，求最大值写 -INFINITY）；先写、同步、再读。\n"
        "真实 GPU 上读到的是上一次留下的任意值，不是 0，所以这种错误在 GPU 上常常只是偶尔算错。"),
    "LoopLimitError": (
        "endless-loop", "循环停不下来",
        "检查循环变量是否在变（s >>= 1、j += blockDim.x）以及循环条件。\n"
        "循环在等别的线程块写的标志（自旋等待）时，GPU 上同样会卡住：一次启动之内线程块之间没有先后，"
        "等的那一块可能还没开始运行，也可能永远排不上；要用别的块的结果，就放到下一次启动。"),
    "SpinWaitError": (
        "spin-wait", "循环在等一个等不到的值",
        "看详情里模拟器的说明。等别的线程块写的值时，读要用 volatile 或原子操作（atomicAdd(p, 0)）；块之间的先后"
        "要靠票号（每块开始时 atomicAdd 一个全局计数器，用拿到的号代替 blockIdx），不能靠 blockIdx 的大小；"
        "要用别的块的结果，也可以放到下一次启动。"),
    "CompileError": (
        "compile-error", "nvcc 会拒绝这段代码", "按报错修改这一行（例如不能写 const 指针指向的内存、__shared__ 变量不能带初始值）。"),
    "UnsupportedError": (
        "unsupported", "模拟器不支持这一行的写法",
        "换成讲义里用到的写法；模拟器支持的子集见「CUDA C模拟器」一页。"),
    "WarpSyncError": (
        "warp-sync", "warp 级原语的参与线程不对", "检查 __shfl_*_sync 的掩码与调用它的线程。"),
    "LaunchError": (
        "launch", "启动配置不合法", "按报错里的上限调整线程块数、每块的线程数或共享内存。"),
    "SimtRuntimeError": ("runtime-error", "运行时错误", ""),
}


def _missing_semicolon_line(text: str, line: int) -> int:
    """编译器把「少了分号」报在下一个记号所在的行；学习者要改的是它之前最后一行代码的结尾。"""
    lines = text.splitlines()
    for i in range(min(line, len(lines)) - 2, -1, -1):
        code = lines[i].split("//")[0].rstrip()
        if not code:
            continue
        return line if code.endswith((";", "{", "}")) or code.lstrip().startswith("#") else i + 1
    return line


def _unclosed_paren_line(text: str, line: int) -> int | None:
    """「expected ')'」报在下一个记号所在的行：往上找括号没有配对的那一行。"""
    lines = text.splitlines()
    for i in range(min(line, len(lines)) - 1, max(-1, line - 6), -1):
        code = lines[i].split("//")[0]
        if code.count("(") > code.count(")"):
            return i + 1
    return None


def simt_hint(exc: BaseException, file: str, text: str | None = None, fixes: dict[str, str] | None = None) -> Hint | None:
    """模拟器的错误 -> 诊断。``text`` 是学习者文件的内容（用来修正「少了分号」的行号）；
    ``fixes``：{诊断的 key: 这个实验自己的改法}，代替通用的说明。"""
    msg = re.sub(rf"\S*/{re.escape(file)}", file, str(exc))     # 学习者文件的绝对路径只留文件名，与标题一致
    fixes = fixes or {}
    if type(exc).__name__ == "UnsupportedError":
        m = re.search(r"未声明的标识符 (\w+)", msg)
        if m:
            return Hint("undeclared", f"用到了没有声明的变量 {m.group(1)}", file, error_line(exc),
                        detail=zh_part(msg), fix=f"先声明 {m.group(1)}（或检查拼写）。")
        if "无法解析" in msg:
            line = error_line(exc)
            if "expected ';'" in msg and text is not None and line is not None:
                line = _missing_semicolon_line(text, line)
                return Hint("syntax-error", "语法错误：这一行的结尾少了分号", file, line, detail=zh_part(msg),
                            fix="在这一行的末尾加上 ;（编译器在下一行才发现它少了）。")
            if "expected ')'" in msg and text is not None and line is not None:
                open_line = _unclosed_paren_line(text, line)
                if open_line is not None:
                    return Hint("syntax-error", "语法错误：这一行的括号没有配对（少了右括号）", file, open_line,
                                detail=zh_part(msg), fix="数一数这一行的 ( 和 )：每个左括号都要有对应的右括号。")
            return Hint("syntax-error", "语法错误：这一行（或上一行的结尾）无法解析", file, line,
                        detail=zh_part(msg), fix="常见原因：上一行少了分号、括号没有配对。")
    if type(exc).__name__ == "GlobalMemoryRaceError" and text is not None:
        h = _plain_access_beside_atomic(exc, msg, file, text)
        if h is not None:
            return h
    if type(exc).__name__ == "GlobalMemoryRaceError" and exc.hazard == "WAW" and exc.line == exc.other_line \
            and "global-race" not in fixes:         # 同一行的写被几个线程执行
        fixes = {**fixes, "global-race": "每个输出元素只让一个线程写，例如 if (tid == 0) out[row] = …;。"}
    if type(exc).__name__ == "OutOfBoundsError":
        m = re.search(r"[读写]共享数组 (\w+)\[(-?\d+)\] 越界：数组只有 (\d+) 个", msg)
        if m:                                   # 共享数组越界：实验给的全局内存边界的改法不对路
            name, idx, size = m.group(1), int(m.group(2)), int(m.group(3))
            return Hint("out-of-bounds", f"共享数组 {name} 越界：下标 {idx}，它只有 {size} 个元素"
                        f"（模拟器：{type(exc).__name__}）", file, error_line(exc), detail=zh_part(msg),
                        fix=f"让下标的算法和 {name} 声明的大小一致：检查参与的线程（例如 tid < s，不是 tid <= s）"
                            f"和行距；改了行距（例如加一列填充）就要把 {name} 的声明也改大。")
    if type(exc).__name__ == "SpinWaitError" and getattr(exc, "schedule", None) == "waves":
        return Hint("not-resident", f"网格大于同时驻留的块数，先开始的块在循环里等后面的块（模拟器：{type(exc).__name__}）",
                    file, error_line(exc), detail=zh_part(msg),
                    fix=fixes.get("not-resident", "让网格不超过同时驻留的块数（SM 数 x 每个 SM 驻留的块数，gpu 模式下用 "
                                  "cudaOccupancyMaxActiveBlocksPerMultiprocessor 查），其余的数据用网格步长循环处理；"
                                  "或者改用协作启动与 grid.sync()。"))
    for cls in type(exc).__mro__:
        if cls.__name__ in _SIMT_HINTS:
            key, cause, fix = _SIMT_HINTS[cls.__name__]
            if key == "barrier-divergence" and "grid.sync()" in msg:     # 网格屏障，不是块内的 __syncthreads()
                cause = "grid.sync() 没有被网格里的所有线程执行到（网格屏障写在了分支里，或有的线程已经 return）"
                fix = "把 grid.sync() 移到所有分支之外：网格里每一块的每一个线程都要到达同一个网格屏障。"
            detail = zh_part(msg)
            if key == "endless-loop":             # 评分程序里学习者传不了这两个参数
                detail = re.sub(r"[；，]?确实需要更多[^）)]*", "", detail)
            return Hint(key, f"{cause}（模拟器：{type(exc).__name__}）", file, error_line(exc),
                        detail=detail, fix=fixes.get(key, fix))
    return None


def _plain_access_beside_atomic(exc: BaseException, msg: str, file: str, text: str) -> Hint | None:
    """全局内存竞争的另一方是一次普通的读写、报错的这一行是原子操作时，该改的是那一行
    （例如内核里先 ``*out = 0`` 清零，别的线程块已经在 ``atomicAdd``）：诊断指向那一行。
    行号与种类取自异常的属性 ``line``、``other_line``、``hazard``。"""
    line, other = getattr(exc, "line", None), getattr(exc, "other_line", None)
    lines = text.splitlines()
    if not (isinstance(line, int) and isinstance(other, int) and 0 < line <= len(lines) and 0 < other <= len(lines)):
        return None
    here, there = lines[line - 1].split("//")[0], lines[other - 1].split("//")[0]
    if "atomic" not in here or "atomic" in there:
        return None
    what = "读" if exc.hazard == "WAR" else "写"
    return Hint("global-race", f"第 {other} 行普通地{what}了一个别的线程块正在用原子操作累加的元素"
                f"（模拟器：{type(exc).__name__}）", file, other, detail=zh_part(msg),
                fix="原子操作只和原子操作互相排队，普通的读写插在它们中间没有先后。清零放在启动之前（内核外），"
                    "内核里只用 atomicAdd 累加它，不要再普通地写或读它。")


def kernel_name_hint(exc: BaseException, file: str, kernel: str, text: str) -> Hint | None:
    """启动器找不到骨架里的内核名（改了名字或删掉了 extern "C"）。"""
    if isinstance(exc, ValueError) and "没有名为" in str(exc) and kernel in str(exc):
        return Hint("kernel-name", f"{file} 里没有名为 {kernel} 的 extern \"C\" __global__ 内核", file,
                    find_line(text, r"__global__"), detail=zh_part(str(exc)),
                    fix=f"保留骨架里的内核名 {kernel} 和 extern \"C\"：评分程序按这个名字启动它。")
    return None


def compile_hint(exc: BaseException, file: str) -> Hint | None:
    """nvrtc / 模拟器前端的编译错误，带行号。"""
    text = str(exc)
    m = re.search(rf"{re.escape(file)}\((\d+)\): (?:catastrophic )?(?:error|错误)[^\n]*", text)
    if m:
        inc = re.search(r'cannot open source file "([^"]+)"', m.group(0))
        if inc:                                     # NVRTC 只有 CUDA 自己的头文件：<cstdio>、<iostream> 等都没有
            return Hint("compile-error", f"编译错误：GPU 上的编译器（NVRTC）没有头文件 <{inc.group(1)}>", file,
                        int(m.group(1)), detail=m.group(0),
                        fix="删掉这一行 #include：printf、数学函数与 CUDA 的内置函数不用包含头文件就能用。")
        return Hint("compile-error", "编译错误", file, int(m.group(1)), detail=m.group(0),
                    fix="按编译器的提示修改这一行。")
    return None


def cuda_error_hint(exc: BaseException, file: str, kernel: str, text: str, params: str,
                    fixes: dict[str, str] | None = None) -> Hint:
    """CUDA C 实验的内核出错时的诊断：模拟器的错误、编译错误、找不到内核名、签名不对（``params`` 是骨架里的参数表），
    其余的异常原样报出（带行号）。"""
    h = simt_hint(exc, file, text, fixes) or compile_hint(exc, file) or kernel_name_hint(exc, file, kernel, text)
    if h is not None:
        return h
    if isinstance(exc, TypeError) and kernel in str(exc):
        return Hint("signature", "内核的签名不对", file, find_line(text, kernel), detail=str(exc),
                    fix=f"保留骨架里的内核名和参数：{params}。")
    return Hint("exception", f"运行时抛出 {type(exc).__name__}", file, error_line(exc), detail=zh_part(str(exc))[:800])
