"""命令行 reduction-lab bench / report 的错误输入：在开始任何测量之前退出（退出码 2），信息指出问题；
坏的结果文件给出清楚的错误，不是 traceback。"""

from __future__ import annotations

import json
import os

import pytest

from reduction_lab.bench import cli, harness, isolate


@pytest.fixture
def no_work(monkeypatch):
    """任何测量都不许开始：harness.run 被调用就算失败。"""
    def boom(*a, **k):
        raise AssertionError("参数错误却开始了测量")
    monkeypatch.setattr(harness, "run", boom)
    monkeypatch.setattr(isolate, "run_isolated", boom)


def _bench(capsys, *argv):
    rc = cli.main(["bench", *argv, "--no-progress"])
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("argv,words", [
    (["softmax", "--iters", "0"], "--iters"),
    (["softmax", "--warmup", "-1"], "--warmup"),
    (["softmax", "--budget", "-1"], "--budget"),
    (["softmax", "--budget", "0"], "--budget"),
    (["softmax", "--budget", "inf"], "--budget"),
    (["softmax", "--budget", "nan"], "--budget"),
    (["row-sum", "--n", "0,1024"], "--n"),
    (["row-sum", "--n", "-4"], "--n"),
    (["full-sum", "--full-sum-n", "0"], "--full-sum-n"),
    (["softmax", "--total-elems", "0"], "--total-elems"),
    (["softmax", "--impl", ","], "--impl"),
    (["softmax", "--prefix", "../x"], "--prefix"),
    (["softmax", "--merge"], "--merge"),
    (["full-sum", "--dtype", "bf16"], "--dtype"),
    (["softmax", "--child-timeout", "0"], "--child-timeout"),
    (["softmax", "--child-timeout", "5", "--processes", "one"], "--child-timeout"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_bad_arguments_stop_before_work(no_work, capsys, argv, words):
    rc, err = _bench(capsys, *argv)
    assert rc == 2 and "错误" in err and words in err


def test_unparsable_numbers(no_work, capsys):
    with pytest.raises(SystemExit) as ei:
        cli.main(["bench", "softmax", "--n", "abc"])
    assert ei.value.code == 2
    assert "无法解析的整数" in capsys.readouterr().err


def test_sweep_that_measures_nothing_is_refused(capsys):
    rc, err = _bench(capsys, "softmax", "--n", "2^20", "--total-elems", "2^10", "--impl", "torch")
    assert rc == 2 and "没有可测的形状" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root 不受文件权限限制，只读目录对它仍可写")
def test_unwritable_json_path_fails_first(no_work, capsys, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        rc, err = _bench(capsys, "softmax", "--json", str(ro / "out.json"))
    finally:
        ro.chmod(0o700)
    assert rc == 2 and "没有写" in err


@pytest.mark.parametrize("make", ["file-parent", "is-dir"])
def test_impossible_json_path_fails_first(no_work, capsys, tmp_path, make):
    f = tmp_path / "plain"
    f.write_text("x")
    path = f / "out.json" if make == "file-parent" else tmp_path
    rc, err = _bench(capsys, "softmax", "--json", str(path))
    assert rc == 2 and ("不是目录" in err or "是一个目录" in err)


def test_report_dir_that_is_a_file(no_work, capsys, tmp_path):
    f = tmp_path / "plain"
    f.write_text("x")
    rc, err = _bench(capsys, "softmax", "--report-dir", str(f / "sub"))
    assert rc == 2 and "不是目录" in err


@pytest.mark.parametrize("content,words", [
    ("{not json", "不是合法的JSON"),
    ("[1, 2]", "不是reduction-lab bench写出的结果文件"),
    ('{"meta": {}, "suites": []}', "不是reduction-lab bench写出的结果文件"),
    (b"\xff\xfe\x00garbage", "读不了"),
])
def test_corrupt_merge_target_fails_first(no_work, capsys, tmp_path, content, words):
    p = tmp_path / "old.json"
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    rc, err = _bench(capsys, "softmax", "--json", str(p), "--merge")
    assert rc == 2 and words in err


@pytest.mark.parametrize("content,words", [
    ("{not json", "不是合法的JSON"),
    ('{"meta": {}}', "缺少meta/suites"),
    ('{"meta": {}, "suites": {"softmax": {"shapes": 3}}}', "格式不对"),
    ('{"meta": {}, "suites": {"softmax": {}}}', "格式不对"),
])
def test_report_on_broken_files(capsys, tmp_path, content, words):
    p = tmp_path / "r.json"
    p.write_text(content)
    rc = cli.main(["report", str(p), "--out", str(tmp_path), "--no-plots"])
    err = capsys.readouterr().err
    assert rc == 2 and words in err and "Traceback" not in err


def test_report_on_missing_file(capsys, tmp_path):
    rc = cli.main(["report", str(tmp_path / "missing.json")])
    assert rc == 2 and "读不了" in capsys.readouterr().err


def test_merge_keeps_other_suites(capsys, tmp_path):
    """正常路径：--merge 只替换这次运行的套件。"""
    p = tmp_path / "res.json"
    p.write_text(json.dumps({"schema": 1, "meta": {"mode": "x"}, "suites": {"full-sum": {"keep": True}}}))
    rc, _ = _bench(capsys, "softmax", "--impl", "torch", "--n", "64", "--total-elems", "128",
                   "--iters", "1", "--warmup", "0", "--json", str(p), "--merge")
    doc = json.loads(p.read_text())
    assert rc == 0 and doc["suites"]["full-sum"] == {"keep": True} and "softmax" in doc["suites"]
