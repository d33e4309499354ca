"""命令行 ``reduction-lab``：``lab ...``（实验，:mod:`reduction_lab.labs.cli`）以及
``bench`` / ``report``（基准测试，:mod:`reduction_lab.bench.cli`）。"""

from __future__ import annotations

import sys


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("用法：reduction-lab lab {list,start,check} ...   实验（reduction-lab lab -h）\n"
              "      reduction-lab bench ... | report ...         基准测试与报告（见下）\n")
    if argv and argv[0] == "lab":
        from .labs.cli import main as lab_main

        return lab_main(argv)
    from .bench.cli import main as bench_main

    return bench_main(argv)


if __name__ == "__main__":
    sys.exit(main())
