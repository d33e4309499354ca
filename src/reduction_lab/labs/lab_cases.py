"""``pytest --lab NAME`` 收集的测试：每个评分用例一个测试，外加一个「诊断」测试。

评分只做一次（整个会话共用），各个测试只是读出它的结果。
"""

from __future__ import annotations

import pytest

import reduction_lab  # noqa: F401  先于 triton 导入


@pytest.fixture(scope="session")
def lab_grade(request):
    from reduction_lab import labs

    cfg = request.config
    try:
        result = labs.check(cfg.getoption("--lab"), cfg.getoption("--lab-dir"), backend=cfg.getoption("--backend"),
                            bench=False)
    except labs.LabError as exc:          # 找不到文件、后端不对：说一次，不给每个用例一份回溯
        pytest.exit(str(exc), returncode=pytest.ExitCode.USAGE_ERROR)
    print("\n" + result.report())
    return result


def test_case(lab_grade, lab_case):
    r = lab_grade.results[lab_case - 1]
    if r.ok:
        return
    lines = [f"用例 {r.index}（{r.case.name}，{r.case.label}）没有通过：{r.note}"]
    related = [h for h in lab_grade.hints if r.index in h.cases or h.key == "todo"]
    sources = {p.name: p.read_text(encoding="utf-8").splitlines() for p in lab_grade.files}
    lines += [h.render(sources) for h in related]
    pytest.fail("\n".join(lines), pytrace=False)


def test_diagnosis(lab_grade):
    """用例之外的问题（没完成的 TODO、模拟器检查）也算不通过。"""
    sources = {p.name: p.read_text(encoding="utf-8").splitlines() for p in lab_grade.files}
    rest = [h for h in lab_grade.hints if not h.cases]
    if rest:
        pytest.fail("\n".join(h.render(sources) for h in rest), pytrace=False)
