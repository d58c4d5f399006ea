"""Bad input, end to end through `async-spark train`: exit code 2, one line naming the file and
line or the option, no traceback, nothing written. None of these cases starts Spark."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from async_spark.cli import main

# (name, file content or None, extra argv, needle; {path} is the data file)
CASES = [
    ("token not a number", "1 1:0.5 2:abc\n", [], "{path}:1"),
    ("second line bad", "1 1:0.5\n0 2:x:3\n", [], "{path}:2"),
    ("index zero", "1 0:1.0\n", [], "{path}:1"),
    ("negative index", "1 -3:1.0\n", [], "{path}:1"),
    ("unsorted indices", "1 1:1\n1 3:1.0 2:1.0\n", [], "{path}:2"),
    ("duplicate index", "1 2:1.0 2:3.0\n", [], "{path}:1"),
    ("NaN value", "1 1:0.5\n0 1:nan\n", [], "{path}:2"),
    ("Inf value", "1 1:inf\n", [], "{path}:1"),
    ("NaN label", "nan 1:1\n", [], "{path}:1"),
    ("label not a number", "abc 1:1\n", [], "{path}:1"),
    ("qid token", "1 qid:3 1:1.0\n", [], "{path}:1"),
    ("missing colon", "1 1:1\n0 1\n", [], "{path}:2"),
    ("missing value", "1 1:\n", [], "{path}:1"),
    ("binary garbage", b"\x00\xff\xfe\x01garbage\x02\n", [], "{path}"),
    ("empty file", "", [], "{path}"),
    ("blank lines only", "\n\n\n", [], "{path}"),
    ("index past --num-features", "1 1:1.0\n0 5:1.0\n", ["--num-features", "3"], "{path}:2"),
    ("three classes for logistic", "0 1:1\n1 1:2\n2 1:3\n", ["--loss", "logistic"], "{path}"),
    ("real-valued labels, loss auto", "0.5 1:1\n1 1:2\n2 1:3\n", [], "{path}"),
    ("fewer rows than partitions", "0 1:1\n1 1:2\n", ["--partitions", "4"], "{path}"),
    ("negative partitions", None, ["--partitions", "-1"], "--partitions"),
    ("zero max updates", None, ["--max-updates", "0"], "--max-updates"),
    ("negative time budget", None, ["--time-budget", "-5"], "--time-budget"),
    ("NaN target", None, ["--target-objective", "nan"], "--target-objective"),
    ("zero checkpoint interval", None, ["--checkpoint-every", "0"], "--checkpoint-every"),
    ("momentum for sgd", None, ["--method", "sgd", "--momentum", "0.5"], "--momentum"),
    ("negative ssp", None, ["--ssp", "-1"], "ssp"),
    ("unknown publisher", None, ["--publisher", "pigeon"], "--publisher"),
    ("unknown format", None, ["--format", "csv"], "--format"),
    ("unknown step rule", None, ["--step-rule", "weird"], "--step-rule"),
    ("non-number option", None, ["--l2", "much"], "--l2"),
]


@pytest.mark.parametrize(("name", "content", "argv", "needle"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_cleanly(tmp_path, capsys, name, content, argv, needle):
    path = tmp_path / "data.svm"
    if content is None:
        path.write_text("1 1:0.5\n0 2:0.25\n1 1:1\n0 2:1\n")
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    out = tmp_path / "out"
    args = ["train", "--data", str(path), "--partitions", "1", *argv, "--out", str(out), "--quiet"]
    if name == "non-number option":  # argparse exits from inside main
        with pytest.raises(SystemExit) as exited:
            main(args)
        code = exited.value.code
    else:
        code = main(args)
    assert code == 2
    err = capsys.readouterr().err.strip()
    lines = err.splitlines()
    assert lines and "Traceback" not in err
    if name != "non-number option":  # argparse prints usage + one error line
        assert len(lines) == 1, err
    assert needle.format(path=path) in err, err
    assert not out.exists()


def test_a_feature_index_too_large_for_memory_is_refused_before_allocation(tmp_path):
    """Through the installed command, in its own process: exit code 2 and one line naming the
    file, the line and the limit (it used to end in MemoryError for 745 GiB, exit code 1)."""
    path = tmp_path / "huge.svm"
    path.write_text("1 1:0.5\n0 99999999999:1.0\n1 2:1\n0 1:1\n")
    out = tmp_path / "out"
    script = Path(sys.executable).with_name("async-spark")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "async_spark.cli"]
    env = {k: v for k, v in os.environ.items() if k != "ASYNC_SPARK_MAX_MODEL_BYTES"}
    proc = subprocess.run(
        [*cmd, "train", "--data", str(path), "--partitions", "1", "--out", str(out), "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    err = proc.stderr.strip()
    assert proc.returncode == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err and "MemoryError" not in err, err
    assert f"{path}:2: feature index 99999999999 is above the limit of " in err, err
    assert "features: the model (d + 1 float64) must fit in" in err, err
    assert not out.exists()


def test_an_unreadable_data_folder(tmp_path, capsys):
    folder = tmp_path / "parts"
    folder.mkdir()
    assert main(["train", "--data", str(folder), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert str(folder) in err and len(err.splitlines()) == 1


def _checkpointed_run(tmp_path, data):
    """A run with checkpoints, trained in-process (no Spark needed to make one)."""
    from async_spark.data.dataset import open_dataset
    from async_spark.solvers import TrainConfig, train_linear

    out = tmp_path / "run"
    cfg = TrainConfig(
        data=str(data),
        method="saga",
        partitions=1,
        max_updates=4,
        quiet=True,
        out=str(out),
        checkpoint_every=2,
        step=0.1,
    )
    train_linear(cfg, dataset=open_dataset(str(data), 1, loss="logistic"))
    return out


def test_resume_without_checkpoint(tmp_path, capsys):
    assert main(["train", "--resume", str(tmp_path), "--quiet"]) == 2
    assert "no checkpoint" in capsys.readouterr().err


def test_resume_from_a_truncated_checkpoint(tmp_path, capsys):
    data = tmp_path / "d.svm"
    data.write_text("1 1:0.5\n0 2:0.25\n1 1:1\n0 2:1\n")
    out = _checkpointed_run(tmp_path, data)
    for ckpt in (out / "checkpoints").glob("ckpt-*"):
        npz = ckpt / "arrays.npz"
        npz.write_bytes(npz.read_bytes()[: os.path.getsize(npz) // 2])
    assert main(["train", "--resume", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "arrays.npz" in err and "damaged" in err and len(err.strip().splitlines()) == 1


def test_resume_with_data_of_another_shape(tmp_path, capsys):
    data = tmp_path / "d.svm"
    data.write_text("1 1:0.5\n0 2:0.25\n1 1:1\n0 2:1\n")
    out = _checkpointed_run(tmp_path, data)
    data.write_text("1 1:0.5 5:1\n0 2:0.25\n1 1:1\n0 4:1\n")  # now 5 features
    assert main(["train", "--resume", str(out), "--quiet"]) == 2
    assert "another model or dataset" in capsys.readouterr().err


# Options and inputs in the user's words: each error names the flag as it was written (and the
# value given), says what is accepted and, for a misspelt name, the closest one.
# (name, data file content or None for a valid file, argv, needles that must all appear)
WORDS = [
    (
        "misspelt method",
        None,
        ["--method", "asgaa"],
        ["--method", "'asgaa'", "did you mean 'asaga'?"],
    ),
    (
        "misspelt method in a list",
        None,
        ["--method", "asaga,sgaa"],
        ["--method", "did you mean 'saga'?"],
    ),
    ("misspelt loss", None, ["--loss", "softmx"], ["--loss", "did you mean 'softmax'?"]),
    ("misspelt step rule", None, ["--step-rule", "sqr"], ["--step-rule", "did you mean 'sqrt'?"]),
    (
        "misspelt transport",
        None,
        ["--transport", "resdent"],
        ["--transport", "did you mean 'resident'?"],
    ),
    (
        "misspelt publisher",
        None,
        ["--publisher", "broadcst"],
        ["--publisher", "did you mean 'broadcast'?"],
    ),
    (
        "misspelt stragglers",
        None,
        ["--stragglers", "clod"],
        ["--stragglers", "did you mean 'cloud'?"],
    ),
    ("misspelt format", None, ["--format", "parqet"], ["--format", "did you mean 'parquet'?"]),
    (
        "misspelt built-in",
        None,
        ["--data", "builtin:synthetc"],
        ["'synthetc'", "did you mean 'builtin:synthetic'?"],
    ),
    (
        "format csv",
        None,
        ["--format", "csv"],
        ["--format csv", "CSV is not a supported format", "convert"],
    ),
    (
        "a CSV file",
        "a,b,label\n1,2,0\n3,4,1\n",
        [],
        ["{path}", "CSV is not a supported format", "convert"],
    ),
    (
        "more partitions than rows",
        "1 1:1\n0 1:2\n1 2:1\n",
        ["--partitions", "8"],
        ["{path}", "3 rows cannot fill 8 partitions", "set --partitions to 3 or fewer"],
    ),
    (
        "three classes for logistic",
        "0 1:1\n1 1:2\n2 1:3\n",
        ["--loss", "logistic"],
        ["{path}", "use --loss softmax"],
    ),
    (
        "real-valued labels, the default loss",
        "0.5 1:1\n1 1:2\n2 1:3\n",
        [],
        ["{path}", "loss 'auto' chooses", "non-integer label 0.5", "use --loss squares"],
    ),
    (
        "batch fraction above one",
        None,
        ["--batch-fraction", "2"],
        ["--batch-fraction", "(0, 1]", "got 2.0"],
    ),
    ("negative l2", None, ["--l2", "-1"], ["--l2", ">= 0", "got -1.0"]),
    (
        "num features below a built-in's",
        None,
        ["--data", "builtin:breast_cancer", "--num-features", "20"],
        ["builtin:breast_cancer: rows of 30 features", "--num-features says 20"],
    ),
    ("zero eval interval", None, ["--eval-every", "0"], ["--eval-every", "> 0"]),
    (
        "beta for a synchronous method",
        None,
        ["--method", "saga", "--beta", "0.5"],
        ["--beta", "asynchronous methods", "not saga"],
    ),
    ("negative tau", None, ["--tau", "-1"], ["--tau"]),
    ("zero straggler base", None, ["--straggler-base", "0"], ["--straggler-base", "> 0"]),
    ("zero checkpoints kept", None, ["--keep-checkpoints", "0"], ["--keep-checkpoints", ">= 1"]),
    (
        "checkpoints without out",
        None,
        ["--checkpoint-seconds", "5", "--no-out"],
        ["--checkpoint-seconds", "needs --out DIR"],
    ),
    ("plot without out", None, ["--plot", "--no-out"], ["--plot needs --out DIR"]),
    (
        "bad conf pair",
        None,
        ["--conf", "spark.ui.enabled"],
        ["--conf expects KEY=VALUE", "'spark.ui.enabled'"],
    ),
    (
        "misspelt stragglers parameter",
        None,
        ["--stragglers", "intensity:lots"],
        ["--stragglers", "'intensity:lots'"],
    ),
]


@pytest.mark.parametrize(("name", "content", "argv", "needles"), WORDS, ids=[c[0] for c in WORDS])
def test_errors_name_the_option_as_written(tmp_path, capsys, name, content, argv, needles):
    path = tmp_path / "data.svm"
    path.write_text(content if content is not None else "1 1:0.5\n0 2:0.25\n1 1:1\n0 2:1\n")
    out = tmp_path / "out"
    argv = list(argv)
    tail = ["--out", str(out)]
    if "--no-out" in argv:
        argv.remove("--no-out")
        tail = []
    data = [] if "--data" in argv else ["--data", str(path)]
    partitions = [] if "--partitions" in argv else ["--partitions", "1"]
    code = main(["train", *data, *partitions, *argv, *tail, "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle.format(path=path) in err, (needle, err)
    assert not out.exists()
    assert "num_blocks" not in err and "loss='" not in err, err  # no Python names


def test_the_words_table_is_twenty_or_more():
    assert len(WORDS) >= 20
