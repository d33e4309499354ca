"""命令行 ``reduction-lab lab list | start | check``。

退出码：0 通过（start、list 成功）；1 评分没有通过；2 用法错误（实验不存在、目录里没有骨架等）。
"""

from __future__ import annotations

import argparse
import os
import sys

from ..textcols import columns, table


def add_parser(sub) -> None:
    p = sub.add_parser("lab", help="实验：list / start / check",
                       description="实验：把骨架复制到目录里，完成 TODO，再评分。")
    lsub = p.add_subparsers(dest="lab_command", required=True)
    lsub.add_parser("list", help="列出所有实验（每行：名字 标题）")
    s = lsub.add_parser("start", help="把实验骨架复制到 DIR（默认 ./labs/NAME）")
    s.add_argument("name")
    s.add_argument("dir", nargs="?", default=None)
    s.add_argument("--overwrite", action="store_true", help="覆盖 DIR 里已有的文件")
    c = lsub.add_parser("check", help="评分 DIR（默认 ./labs/NAME）里的代码")
    c.add_argument("name")
    c.add_argument("dir", nargs="?", default=None)
    c.add_argument("--backend", default=None, help="实验评的后端（cuda 也可以写 nvidia）；默认是实验自己的后端")
    c.add_argument("--no-bench", action="store_true", help="gpu 模式下不计时")
    c.add_argument("--case", default=None, metavar="K[,K...]",
                   help="只运行这些编号的用例（成绩表的 # 列，逗号分隔），例如 --case 12；不计时")


def run(args) -> int:
    from . import LabError, check, get, list_labs

    try:
        if args.lab_command == "list":
            print(table(list_labs()))
            return 0
        if args.lab_command == "start":
            lab = get(args.name)
            from . import core

            dest, copied = core.start(lab, args.dir, args.overwrite)
            kept = [f for f in sorted(p.name for p in lab.skeleton_dir().iterdir() if p.is_file())
                    if dest / f not in copied]
            print(f"实验 {lab.name}（{lab.title}）在 {dest}")
            for p in copied:
                print(f"  复制 {p}")
            for f in kept:
                print(f"  保留已有的 {dest / f}（--overwrite 覆盖）")
            print(f"打开 {dest / lab.open_first}，按 TODO(1) 起的步骤完成，然后运行：")
            where = "" if args.dir is None else f" {args.dir}"
            print(f"  reduction-lab lab check {lab.name}{where}")
            return 0
        cases = None
        if args.case is not None:
            try:
                cases = [int(v) for v in args.case.split(",")]
            except ValueError:
                raise LabError(f"--case 要写成逗号分隔的编号，例如 --case 3,12，得到 {args.case!r} "
                               f"(--case takes comma-separated case numbers)") from None
        get(args.name)                       # 名字不对时先报错，不打印「评分……」
        print(f"评分 {args.name}：逐个运行用例……", file=sys.stderr, flush=True)
        progress = _Progress(sys.stderr) if sys.stderr.isatty() else None
        try:
            result = check(args.name, args.dir, backend=args.backend, bench=False if args.no_bench else None,
                           cases=cases, progress=progress)
        finally:
            if progress is not None:
                progress.clear()
    except LabError as exc:
        print(f"错误：{exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("已中断（Ctrl-C）：没有给出成绩", file=sys.stderr)
        return 130
    try:
        print(result.report(), flush=True)
    except BrokenPipeError:                # reduction-lab lab check … | head：读的一方先关了管道
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0 if result.passed else 1


class _Progress:
    """终端里的一行进度：正在运行第几个用例（第一次遇到的形状要先编译内核，TileLang 在 GPU 上每次要几秒）。
    同一行用回车改写，评分结束时擦掉；不是终端（管道、notebook）时不显示。"""

    def __init__(self, stream):
        self.stream = stream
        self.width = 0

    def __call__(self, i: int, n: int, case) -> None:
        text = f"  用例 {i}/{n}：{case.name}（{case.label}）……"
        cols = columns(text)
        self.stream.write("\r" + text + " " * max(0, self.width - cols))    # 盖住上一行更长的部分
        self.stream.flush()
        self.width = cols

    def clear(self) -> None:
        if self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0




def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="reduction-lab")
    sub = p.add_subparsers(dest="command", required=True)
    add_parser(sub)
    return run(p.parse_args(argv))
