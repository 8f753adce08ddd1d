"""The trainer's parts on a minute real Llama: a batch file aligned for the model, one step
that makes the rewarded answer likelier, checkpoints the run's own check accepts, the ack
file the run's own reader takes, and the command line on a foreground run's folder."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from pacer_cli.client import Unreachable
from pacer_trainer import cli
from pacer_trainer.batch import BatchError, from_tensors, load
from pacer_trainer.cli import main
from pacer_trainer.model_files import load_model, prune, save_checkpoint
from pacer_trainer.runs import FolderRun
from pacer_trainer.trainer import PolicyTrainer
from tests.unit.trainer.conftest import PROMPT, batch_tensors, write_step
from workers.runtime.acks import read_ack
from workers.runtime.checkpoints import check_checkpoint

GOOD, BAD = [10, 11, 12, 2], [20, 21, 2]


def test_a_batch_is_shifted_so_each_position_scores_the_next_token() -> None:
    batch = from_tensors(batch_tensors([GOOD, BAD], [1.0, -1.0]))
    first = PROMPT + GOOD
    assert batch.inputs[0].tolist() == first[:-1]
    assert batch.targets[0].tolist() == first[1:]
    # The mask, shifted with the targets, covers exactly the answer's tokens.
    assert batch.targets[0][batch.mask[0]].tolist() == GOOD
    assert batch.targets[1][batch.mask[1]].tolist() == BAD
    assert batch.tokens == len(GOOD) + len(BAD)
    assert (batch.old_logprobs[batch.mask] == -3.0).all()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t.pop("advantages"), "no tensor advantages"),
        (lambda t: t.update(logprobs=t["logprobs"][:, :-1]), "must have one shape"),
        (lambda t: t.update(rewards=torch.zeros(5)), "one value per sample"),
        (lambda t: t["loss_mask"].__setitem__((0, 0), True), "first token"),
    ],
)
def test_a_batch_that_does_not_fit_is_refused_saying_why(change, message: str) -> None:  # type: ignore[no-untyped-def]
    tensors = batch_tensors([GOOD, BAD], [1.0, -1.0])
    change(tensors)
    with pytest.raises(BatchError, match=message):
        from_tensors(tensors)


def test_a_file_that_is_no_batch_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BatchError, match="does not exist"):
        load(tmp_path / "batch.pt")
    (tmp_path / "batch.pt").write_bytes(b"not torch")
    with pytest.raises(BatchError, match="cannot be read"):
        load(tmp_path / "batch.pt")
    torch.save([1, 2], tmp_path / "batch.pt")
    with pytest.raises(BatchError, match="holds list"):
        load(tmp_path / "batch.pt")


def test_one_step_makes_the_rewarded_answer_likelier_and_the_other_rarer(base_model: Path) -> None:
    model, dtype = load_model(base_model)
    assert dtype == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in model.parameters())
    batch = from_tensors(batch_tensors([GOOD, BAD], [1.0, -1.0]))
    trainer = PolicyTrainer(model, lr=1e-2)

    def answer_logprob() -> torch.Tensor:
        with torch.no_grad():
            return torch.where(batch.mask, trainer.logprobs(batch), 0.0).sum(-1)

    before = answer_logprob()
    stats = trainer.step(batch)
    after = answer_logprob()
    assert after[0] > before[0] and after[1] < before[1], (before, after)
    assert stats.tokens == len(GOOD) + len(BAD) and stats.grad_norm > 0


def test_a_batch_of_groups_that_all_agreed_moves_nothing(base_model: Path) -> None:
    model, _ = load_model(base_model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    stats = PolicyTrainer(model).step(from_tensors(batch_tensors([GOOD, BAD], [0.0, 0.0])))
    assert stats.loss == 0.0
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_a_checkpoint_is_a_model_folder_the_run_accepts(base_model: Path, tmp_path: Path) -> None:
    model, dtype = load_model(base_model)
    PolicyTrainer(model, lr=1e-2).step(from_tensors(batch_tensors([GOOD, BAD], [1.0, -1.0])))
    folder = save_checkpoint(model, base_model, tmp_path / "checkpoints" / "v000001", dtype)
    assert check_checkpoint(str(folder), tmp_path) == folder.resolve()
    assert (folder / "tokenizer.json").read_text() == (base_model / "tokenizer.json").read_text()
    saved = load_file(folder / "model.safetensors")
    base = load_file(base_model / "model.safetensors")
    assert saved.keys() == base.keys()
    assert all(t.dtype == torch.bfloat16 for t in saved.values())
    assert any(not torch.equal(saved[k], base[k]) for k in base)  # the step changed weights
    expected = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}
    assert all(torch.equal(saved[k], expected[k]) for k in saved)
    assert not [p.name for p in folder.parent.iterdir() if p.name.startswith(".")]
    reloaded, _ = load_model(folder)  # a checkpoint is also a base to resume from
    assert reloaded.state_dict().keys() == model.state_dict().keys()


def test_prune_keeps_the_newest_checkpoints(base_model: Path, tmp_path: Path) -> None:
    for version in (1, 2, 3):
        (tmp_path / f"v{version:06d}").mkdir()
    assert [p.name for p in prune(tmp_path, 2)] == ["v000001"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v000002", "v000003"]


def test_a_foreground_run_gets_acks_its_own_reader_takes(base_model: Path, tmp_path: Path) -> None:
    output = tmp_path / "run"
    write_step(output, 1, batch_tensors([GOOD, BAD], [1.0, -1.0], [1.0, 0.0]))
    write_step(output, 2, batch_tensors([BAD, GOOD], [-1.0, 1.0], [0.0, 1.0]))
    out = io.StringIO()
    code = main(["--base", str(base_model), "--output", str(output), "--max-steps", "2"], out=out)
    assert code == 0, out.getvalue()
    lines = out.getvalue().splitlines()
    assert lines[0] == f"following the run weights from {base_model}"
    assert lines[1].startswith("step 1: loss ") and ", reward 0.500, version 1, " in lines[1]
    assert lines[2].startswith("step 2: ") and ", version 2, " in lines[2]
    for step in (1, 2):
        ack = read_ack(output / "acks" / str(step), output)
        assert ack is not None and ack.version == step
        assert ack.checkpoint == str((output / "checkpoints" / f"v{step:06d}").resolve())
    # Started again, it resumes from the last acknowledgement: nothing is trained twice.
    write_step(output, 3, batch_tensors([GOOD, BAD], [1.0, -1.0]))
    out = io.StringIO()
    argv = ["--base", str(base_model), "--output", str(output), "--max-steps", "3"]
    assert main(argv, out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0] == (
        f"following the run from step 2, version 2, weights from {output}/checkpoints/v000002"
    )
    assert [line.split(":")[0] for line in lines[1:-1]] == ["step 3"]
    assert json.loads((output / "acks" / "3").read_text())["policy_version"] == 3
    assert FolderRun(output).acked().version == 3


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--output", "x"], "the following arguments are required: --base"),
        (["--base", "{base}"], "follow one run"),
        (["--base", "{base}", "--run", "3", "--output", "x"], "follow one run"),
        (["--base", "{base}", "--run", "3", "--api", "http://h"], "needs --api URL and --token"),
        (["--base", "{base}", "--output", "x", "--lr", "0"], "--lr must be above 0"),
        (["--base", "{base}", "--output", "x", "--clip", "1.5"], "--clip must be in"),
        (["--base", "/nonexistent", "--output", "x"], "not a model folder"),
    ],
)
def test_bad_usage_exits_2_saying_what_is_wrong(
    argv: list[str],
    message: str,
    base_model: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PACER_TOKEN", raising=False)
    with pytest.raises(SystemExit) as ended:
        main([a.replace("{base}", str(base_model)) for a in argv])
    assert ended.value.code == 2
    assert message in capsys.readouterr().err


def test_an_output_folder_that_is_not_there_is_an_error_in_one_line(
    base_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["--base", str(base_model), "--output", str(tmp_path / "nowhere")])
    assert code == 1
    assert capsys.readouterr().err == (
        f"pacer_trainer: error: {tmp_path / 'nowhere'} is not a folder (the run's --output)\n"
    )


def test_a_hosted_run_that_cannot_be_reached_is_an_error_in_one_line(
    base_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--base", str(base_model), "--run", "1", "--api", "http://127.0.0.1:9", "--token", "t"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("pacer_trainer: error: http://127.0.0.1:9: ConnectError")
    assert err.count("\n") == 1


def test_a_step_with_nothing_to_learn_keeps_the_version_and_its_checkpoint(
    base_model: Path, tmp_path: Path
) -> None:
    """Before any step changed the weights the ack names none (the engines' own are the
    version's), and after, the same checkpoint again: no engine reloads what it has."""
    output = tmp_path / "run"
    write_step(output, 1, batch_tensors([GOOD, BAD], [0.0, 0.0], [0.0, 0.0]))
    write_step(output, 2, batch_tensors([GOOD, BAD], [1.0, -1.0], [1.0, 0.0]))
    write_step(output, 3, batch_tensors([GOOD, GOOD], [0.0, 0.0], [1.0, 1.0]))
    out = io.StringIO()
    code = main(["--base", str(base_model), "--output", str(output), "--max-steps", "3"], out=out)
    assert code == 0, out.getvalue()
    acks = [json.loads((output / "acks" / str(n)).read_text()) for n in (1, 2, 3)]
    first = str(output / "checkpoints" / "v000001")
    assert acks == [
        {"policy_version": 0},
        {"policy_version": 1, "checkpoint": first},
        {"policy_version": 1, "checkpoint": first},
    ]
    assert [p.name for p in (output / "checkpoints").iterdir()] == ["v000001"]
    lines = out.getvalue().splitlines()
    assert ", version 0 (unchanged: every group agreed), " in lines[1]
    assert ", version 1 (unchanged: every group agreed), " in lines[3]
    assert read_ack(output / "acks" / "1", output) is not None  # the run takes all three
    assert read_ack(output / "acks" / "3", output) is not None


class FlakyRun(FolderRun):
    """A foreground run whose API-like calls fail to answer the first ``failures`` times."""

    def __init__(self, output: Path, failures: int) -> None:
        super().__init__(output)
        self.failures = failures

    def ack(self, step: int, version: int, checkpoint: Path | None) -> None:
        if self.failures:
            self.failures -= 1
            raise Unreachable("http://127.0.0.1:9: ConnectError")
        super().ack(step, version, checkpoint)


def test_an_ack_is_sent_again_while_the_api_does_not_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli, "RETRY_S", 0.0)
    run = FlakyRun(tmp_path, failures=2)
    cli.Watch(run).ack(1, 1, None)
    assert json.loads((tmp_path / "acks" / "1").read_text()) == {"policy_version": 1}
    monkeypatch.setattr(cli, "UNREACHABLE_GRACE_S", 0.0)
    with pytest.raises(Unreachable):
        cli.Watch(FlakyRun(tmp_path, failures=1)).ack(2, 2, None)


def test_a_last_checkpoint_that_is_gone_is_an_error_not_a_silent_restart(
    base_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "acks").mkdir()
    gone = tmp_path / "checkpoints" / "v000004"
    (tmp_path / "acks" / "7").write_text(json.dumps({"policy_version": 4, "checkpoint": str(gone)}))
    assert main(["--base", str(base_model), "--output", str(tmp_path)]) == 1
    assert capsys.readouterr().err == (
        f"pacer_trainer: error: step 7 was acknowledged with {gone}, which is gone: the "
        "trainer cannot take up the weights it left the run on\n"
    )
