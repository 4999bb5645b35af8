"""The helpful doctors environment: reading the diagnosis, the consultation with the patient, local data,
``process`` (patient on the policy's server or its own) and ``evaluate``."""

from __future__ import annotations

import itertools
import os
import re
import threading
from types import SimpleNamespace

import pytest
from transformers import AutoTokenizer

from atroposlib.testing.scripted_server import launch_scripted_server
from environments.community.helpful_doctors.doctor import Consultation, DoctorEnv, doctor_prompt
from environments.community.helpful_doctors.medqa import (
    MedQAItem,
    diagnosis_of,
    items_from_rows,
    named_option,
)
from environments.community.helpful_doctors.patient import OPENING, Patient
from tests.environments.community.community_runs import bad_rows_error
from tests.helpers.cli_runs import FIXTURES, REPO_ROOT, read_jsonl, run_env
from tests.helpers.multi_turn_runs import turn_of
from tests.helpers.single_turn_runs import OFFLINE, offline_env, setup_failure

SAMPLE = FIXTURES / "community" / "helpful_doctors" / "medqa_sample.jsonl"
ROWS = read_jsonl(SAMPLE)
ITEMS = items_from_rows(ROWS, str(SAMPLE))
CHEST = ITEMS[0]  # D. Hemothorax
NESTED = MedQAItem(
    "q",
    (("A", "Pneumothorax"), ("B", "Tension pneumothorax"), ("C", "Asthma"), ("D", "Pulmonary embolism")),
    "B",
)


def _chosen(reply: str, item: MedQAItem = CHEST, letters: bool = True):
    return named_option(diagnosis_of(reply), item, letters)


@pytest.mark.parametrize(
    ("reply", "chosen"),
    [
        ("The diagnosis is: D", "D"),
        ("The diagnosis is: (D)", "D"),
        ("<think>Dull, absent sounds, low pressure.</think>The diagnosis is: D. Hemothorax", "D"),
        ("the diagnosis is:  hemothorax.", "D"),  # case, spacing, punctuation
        ("Thank you.\nThe Diagnosis is: **Massive HEMOTHORAX**\nBlood fills the pleural space.", "D"),
        ("The diagnosis is: Tension pneumothorax", "B"),  # a wrong option is still read
        ("The diagnosis is: hemothorax\nNot tension pneumothorax: the percussion is dull.", "D"),
    ],
)
def test_equivalent_diagnoses_name_the_option(reply, chosen):
    assert _chosen(reply) == chosen


@pytest.mark.parametrize(
    "reply",
    [
        "The diagnosis is: D or B",  # hedges
        "The diagnosis is: Hemothorax or tension pneumothorax",
        "The diagnosis is: A. Cardiac tamponade B. Tension pneumothorax C. Flail chest D. Hemothorax",  # echo
        "The diagnosis is: B. Hemothorax",  # letter and text disagree
        "The diagnosis is: D\nThe diagnosis is: B",  # stated twice
        "The diagnosis is: E",  # no such option
        "The diagnosis is: bleeding in the chest",  # no option's text
        "<think>The diagnosis is: D</think>I need to examine you first.",  # only inside the reasoning
        "<think>The diagnosis is: D",  # reasoning never closes
        "Hemothorax",  # no diagnosis line
        "The diagnosis is:",
        "",
    ],
)
def test_hedges_hacks_and_malformed_replies_name_nothing(reply):
    assert _chosen(reply) is None


def test_letters_count_only_when_the_options_were_shown_and_nested_texts():
    assert _chosen("The diagnosis is: D", letters=False) is None
    assert _chosen("The diagnosis is: hemothorax", letters=False) == "D"
    assert _chosen("The diagnosis is: Tension pneumothorax", NESTED) == "B"
    assert _chosen("The diagnosis is: a pneumothorax", NESTED) == "A"
    assert _chosen("The diagnosis is: pneumothorax, tension pneumothorax", NESTED) is None
    assert "D. Hemothorax" in doctor_prompt(CHEST, True) and "Hemothorax" not in doctor_prompt(CHEST, False)


class _PatientServer:
    """Answers every patient request with what the patient was last told, and records the requests."""

    def __init__(self):
        self.requests = []

    async def chat_completion(self, **kwargs):
        self.requests.append(kwargs)
        said = kwargs["messages"][-1]["content"]
        message = SimpleNamespace(content=f"You said: {said}")
        return SimpleNamespace(choices=[SimpleNamespace(message=message)])


async def test_the_patient_hears_only_the_visible_reply_and_a_diagnosis_ends_the_consultation():
    server = _PatientServer()
    consultation = Consultation(CHEST, Patient("persona", server, {"max_tokens": 64}), True)
    await consultation.open()
    assert consultation.messages[1] == {"role": "user", "content": f"You said: {OPENING}"}
    assert "D. Hemothorax" in consultation.messages[0]["content"]
    feedback = await consultation.step("<think>The diagnosis is: D</think>Where does it hurt?", 0)
    assert not feedback.done and feedback.messages == [
        {"role": "user", "content": "You said: Where does it hurt?"}
    ]
    assert (
        server.requests[-1]["max_tokens"] == 64 and server.requests[-1]["messages"][0]["content"] == "persona"
    )
    assert "<think>" not in str(server.requests)
    feedback = await consultation.step("I think the diagnosis is unclear. Any fever?", 1)
    assert not feedback.done  # "the diagnosis is" without the colon is no diagnosis
    feedback = await consultation.step("The diagnosis is: D. Hemothorax", 2)
    assert feedback.done and consultation.correct and len(server.requests) == 3
    hedged = Consultation(CHEST, Patient("persona", server), True)
    assert (await hedged.step("The diagnosis is: B or D", 0)).done and not hedged.correct and hedged.stated
    malformed = Consultation(CHEST, Patient("persona", server), True)
    assert (await malformed.step("<think>a</think><think>b</think>x", 0)).done and not malformed.stated


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"question": "q", "answer": "x"}, "row 1: missing field 'options'"),
        ({"question": "q", "options": {"A": "x", "B": "y"}}, "row 1: missing field 'answer'"),
        ({"question": "q", "options": ["x", "y"], "answer": "x"}, "row 1: field 'options' must map"),
        ({"question": "q", "options": {"A": "x", "B": "y"}, "answer": "z"}, "row 1: field 'answer' is not"),
        ({"question": "q", "options": {"A": "x", "B": "y"}, "answer": "x", "answer_idx": "E"}, "row 1: field 'answer_idx' is 'E'"),
        ({"question": "q", "options": {"A": "x", "B": "y"}, "answer": "x", "answer_idx": "B"}, "row 1: field 'answer_idx' \\(B\\)"),
    ],
)  # fmt: skip
async def test_bad_local_rows(tiny_model_dir, tmp_path, row, message):
    await bad_rows_error(DoctorEnv, tiny_model_dir, tmp_path, [ROWS[0], row], message)


async def test_local_data_and_the_hub_default(tiny_model_dir, hub_offline):
    env = offline_env(DoctorEnv, tiny_model_dir, dataset_path=str(SAMPLE), eval_size=2)
    await env.setup()
    assert len(env.train) == 6 and env.test == env.train[:2]
    assert {item.answer for item in env.train} == {row["answer"] for row in ROWS}
    as_string = dict(ROWS[1], options='{"A": "Streptococcus pyogenes", "B": "Adenovirus"}', answer_idx=None)
    assert items_from_rows([as_string], "f")[0].answer_idx == "A"  # a JSON string; the letter from the text
    await setup_failure(offline_env(DoctorEnv, tiny_model_dir), "GBaker/MedQA-USMLE-4-options: cannot load")
    config, server = DoctorEnv.config_init()
    assert (config.group_size, config.max_token_length, config.max_turns) == (32, 15360, 11)
    assert (
        config.tokenizer_name is None and server.model_name == "NousResearch/DeepHermes-3-Llama-3-8B-Preview"
    )
    assert DoctorEnv.env_config_cls(debug_mode=True).show_options  # the original's config key is accepted


_CASE = re.compile(r"Your case:\n(.*?)\n\n", re.DOTALL)
_EPISODE = re.compile(r"<think>episode (\d+)</think>")


def doctor_and_patient(right_every: int = 2):
    """A scripted doctor and patient: the patient repeats the start of its case; doctor episode ``k`` (in order of
    arrival) asks one question, then names the right option when ``k % right_every == 0``, else a wrong
    one."""
    counter = itertools.count()
    lock = threading.Lock()

    def respond(prompt, index):
        text = "\n".join(m["content"] for m in prompt) if isinstance(prompt, list) else str(prompt)
        case = _CASE.search(text)
        if case is not None:  # the patient
            return f"Doctor, this is what happened: {case.group(1)[:60].strip()}"
        found = _EPISODE.search(text)
        with lock:
            episode = int(found.group(1)) if found else next(counter)
        item = next(i for i in ITEMS if i.question[:60].strip() in text)
        if turn_of(prompt) == 0:
            return f"<think>episode {episode}</think>How long has this been going on?"
        letter = (
            item.answer_idx
            if episode % right_every == 0
            else next(k for k, _ in item.options if k != item.answer_idx)
        )
        return f"<think>episode {episode}</think>The diagnosis is: {letter}. {dict(item.options)[letter]}"

    return respond


def test_process_trains_only_the_doctors_replies(scripted, tiny_model_dir):
    args = ["--env.dataset_path", SAMPLE, "--env.group_size", "2", "--env.total_steps", "2",
            "--env.max_num_workers", "1", "--env.max_token_length", "4096"]  # fmt: skip
    groups = scripted.process(DoctorEnv, args, doctor_and_patient())  # the patient on the policy's server
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    assert len(groups) == 2
    for group in groups:
        assert sorted(group["scores"]) == [-1.0, 1.0]
        for tokens, masks, messages in zip(group["tokens"], group["masks"], group["messages"], strict=True):
            assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant"]
            assert (
                "this is what happened" in messages[1]["content"]
                and "D. Hemothorax" not in messages[3]["content"]
            )
            replies = [m["content"] for m in messages if m["role"] == "assistant"]
            trained = tokenizer.decode([m for m in masks if m != -100], skip_special_tokens=False)
            assert len(tokens) == len(masks) and masks[0] == -100
            assert trained == "".join(r + "<|im_end|>" for r in replies)


def test_process_with_the_patient_on_its_own_server(tmp_path, tiny_model_dir):
    respond = doctor_and_patient()
    with (
        launch_scripted_server(respond=respond, tokenizer=tiny_model_dir) as policy,
        launch_scripted_server(
            respond=respond, tokenizer=tiny_model_dir, model_name="patient-model"
        ) as patient,
    ):
        result = run_env(
            REPO_ROOT / "environments" / "community" / "helpful_doctors" / "doctor.py",
            ["process", "--env.dataset_path", SAMPLE, "--env.tokenizer_name", tiny_model_dir,
             "--env.use_wandb", "false", "--env.total_steps", "2", "--env.group_size", "2",
             "--env.max_num_workers", "1", "--env.max_token_length", "4096",
             "--openai.base_url", policy.base_url, "--openai.model_name", "scripted-model",
             "--openai.server_type", "vllm",
             "--patient.base_url", patient.base_url, "--patient.model_name", "patient-model",
             "--patient.api_key", "x"],
            cwd=tmp_path, env={**os.environ, **OFFLINE},
        )  # fmt: skip
        policy_texts = [str(r["body"]) for r in policy.requests]
        patient_requests = list(patient.requests)
    assert result.returncode == 0, result.stderr[-3000:]
    assert policy_texts and not any("Your case:" in t for t in policy_texts)  # the doctor only
    assert patient_requests and {r["body"]["model"] for r in patient_requests} == {"patient-model"}
    groups = read_jsonl(tmp_path / "data" / "doctor.jsonl")
    assert len(groups) == 2 and all(sorted(g["scores"]) == [-1.0, 1.0] for g in groups)


def test_evaluate_reports_exact_metrics(scripted):
    evaluation = scripted.evaluation(
        DoctorEnv,
        ["--env.dataset_path", SAMPLE, "--env.eval_dataset_path", SAMPLE, "--env.max_token_length", "4096",
         "--env.max_eval_workers", "1"],
        doctor_and_patient(right_every=3),
    )  # fmt: skip
    metrics, samples = evaluation.metrics, evaluation.samples
    assert len(samples) == 6 and metrics["eval/percent_correct"] == pytest.approx(2 / 6)
    assert metrics["eval/diagnosed"] == 1.0 and metrics["eval/questions"] == 1.0
    assert metrics["eval/mean_score"] == pytest.approx(-2 / 6) and metrics["eval/mean_turns"] == 2.0
    assert sum(s["chosen"] == s["answer_idx"] for s in samples) == 2
