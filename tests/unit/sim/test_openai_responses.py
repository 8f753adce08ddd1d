"""Choice text, stop truncation, offsets and the logprobs objects of both APIs."""

from __future__ import annotations

import numpy as np

from inference.sim import text
from inference.sim.openai_responses import ChoiceText, completion_choice, models_body
from inference.sim.request import FinishReason, Request
from inference.sim.sampling import SamplingParams
from tests.unit.sim.helpers import make_engine


def make_req(num_tokens: int, reason: FinishReason = FinishReason.LENGTH) -> Request:
    return Request(
        req_id="r",
        prompt_token_ids=np.arange(3),
        max_output_tokens=num_tokens,
        final_reason=reason,
        output_seed=11,
        arrival_time=0.0,
        max_tokens=num_tokens,
    )


def test_text_slices_follow_token_boundaries() -> None:
    choice = ChoiceText(make_req(10), stop=(), min_tokens=0)
    assert choice.text == text.decode(text.output_token_ids(11, 0, 10))
    assert choice.text_between(0, 4) + choice.text_between(4, 10) == choice.text
    assert choice.offset(0) == 0 and choice.offset(10) == len(choice.text)


def test_a_stop_string_is_cut_from_the_text() -> None:
    full = ChoiceText(make_req(10), stop=(), min_tokens=0).text
    stop = full[12:15]
    choice = ChoiceText(make_req(10, FinishReason.STOP), stop=(stop,), min_tokens=0)
    assert choice.text == full[: full.find(stop)]
    assert choice.text_between(0, 10) == choice.text


def test_a_stop_string_within_min_tokens_does_not_cut_the_text() -> None:
    params = SamplingParams(max_tokens=40, min_tokens=10, stop=("ku",), seed=2)
    req = make_engine().add_request("r", np.arange(10), params, 0.0)
    assert (req.max_output_tokens, req.final_reason) == (12, FinishReason.STOP)
    choice = ChoiceText(req, params.stop, params.min_tokens)
    full = text.decode(text.output_token_ids(2, 0, 12))
    assert "ku" in full[: choice.offset(10)]  # too early to stop, so it stays in the text
    assert choice.offset(10) == len(text.decode(text.output_token_ids(2, 0, 10)))
    assert choice.text == full[: full.find("ku", choice.offset(10))]
    assert choice.text_between(0, 12) == choice.text


def test_completion_and_chat_logprobs_have_the_openai_shapes() -> None:
    choice = ChoiceText(make_req(5), stop=(), min_tokens=0)
    body = completion_choice(0, choice, 1, 3, logprobs=2, finished=False)
    logprobs = body["logprobs"]
    assert logprobs["tokens"] == choice.pieces[1:3]
    assert logprobs["text_offset"] == [choice.offset(1), choice.offset(2)]
    assert [len(top) for top in logprobs["top_logprobs"]] == [2, 2]
    assert logprobs["top_logprobs"][0][choice.pieces[1]] == logprobs["token_logprobs"][0]
    assert body["finish_reason"] is None
    chat = choice.chat_logprobs(0, 2, top=0)["content"]
    assert chat[0]["token"] == choice.pieces[0] and chat[0]["top_logprobs"] == []
    assert chat[0]["bytes"] == list(choice.pieces[0].encode())


def test_models_body_reports_max_model_len() -> None:
    body = models_body("m", 4096, 123)
    assert body["data"][0]["max_model_len"] == 4096 and body["data"][0]["id"] == "m"
