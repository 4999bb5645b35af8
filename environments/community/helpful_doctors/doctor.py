"""Helpful doctors: a doctor model questions a simulated patient about a MedQA case and names the diagnosis.

Episode: a patient (``patient.py``: one of three personas, drawn at random for training and fixed per
case for evaluation, told the MedQA case as its symptoms) opens the consultation; the doctor asks
follow-up questions, one reply per turn (up to ``max_turns``, default 11: ten questions and the
diagnosis), and ends with a line "The diagnosis is: ...". With ``show_options`` (default) the doctor's
system prompt lists the case's four answer options; ``--env.show_options false`` hides them (the doctor
must name the right option's text). The patient is any OpenAI-compatible server: ``--patient.base_url``,
``--patient.model_name``, ``--patient.api_key`` ... (or a ``patient:`` section of the ``--config`` YAML),
by default the policy's own server. Only the doctor's tokens are trained; the patient's turns are masked.

Replies may open with ``<think>...</think>``; the patient sees only what follows, and nothing inside
counts. Reward: +1 when the diagnosis names the right option (by letter when the options were shown, or by
its text; case, punctuation and spacing aside: ``medqa.py``), -1 for a wrong option, a hedge naming
several, a diagnosis stated twice, none within the turns or the context, or a malformed reply.
``train/correct``, ``train/diagnosed`` (share of consultations ending in a diagnosis) and ``train/questions``
(doctor replies before it) are logged; evaluate plays each evaluation case once and reports
``eval/percent_correct``, ``eval/diagnosed`` and ``eval/questions``.

Data: by default ``datasets.load_dataset("GBaker/MedQA-USMLE-4-options")``, shuffled with seed 42:
``train`` for training and the first ``eval_size`` (128) cases of ``test`` for evaluation.
``--env.dataset_path`` / ``--env.eval_dataset_path`` read local files in the hub set's schema
(``question``, ``options``, ``answer``, optional ``answer_idx``); a local training file without an
evaluation file also gives the evaluation cases (its first ``eval_size`` after shuffling).

``python environments/community/helpful_doctors/doctor.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from pydantic import Field

from atroposlib.envs.base import EvalHandlingEnum
from atroposlib.envs.config_defaults import LocalServerDefaults
from atroposlib.envs.data_loading import hub_split, load_rows
from atroposlib.envs.episodes import Episode, Feedback
from atroposlib.envs.multi_turn import MultiTurnEnv, MultiTurnEnvConfig
from atroposlib.envs.server_handling.server_manager import ServerManager
from atroposlib.utils.replies import answer_section

try:
    from environments.community.helpful_doctors import medqa
    from environments.community.helpful_doctors import patient as patient_sim
except ModuleNotFoundError:  # run as a script: this folder is on the path
    import medqa
    import patient as patient_sim

doctor_system_prompt = f"""You are a doctor talking with a patient. Find the diagnosis from their symptoms.
Ask the patient follow-up questions, one reply at a time, up to 10 of them, then make your diagnosis.
You may think inside <think> </think> tags before each reply; the patient sees only what follows them.
Once you are confident, give the diagnosis on its own line in the form:

{medqa.FINAL_MESSAGE} <diagnosis>"""

OPTIONS_PROMPT = """

The case has these answer options; your diagnosis must be exactly one of them (its letter and text):
{options}"""


def doctor_prompt(item: medqa.MedQAItem, show_options: bool) -> str:
    """The doctor's system prompt, listing the item's options when ``show_options``."""
    if not show_options:
        return doctor_system_prompt
    listed = "\n".join(f"{letter}. {text}" for letter, text in item.options)
    return doctor_system_prompt + OPTIONS_PROMPT.format(options=listed)


@dataclass
class Consultation:
    """One episode: the case, the patient, and the diagnosis once stated."""

    item: medqa.MedQAItem
    patient: patient_sim.Patient
    show_options: bool
    messages: list[dict[str, Any]] = field(default_factory=list)
    stated: bool = False
    diagnosis: Optional[str] = None
    chosen: Optional[str] = None

    async def open(self) -> None:
        """Ask the patient for its opening words and set the doctor's opening chat."""
        opening = await self.patient.opening()
        self.messages = [
            {"role": "system", "content": doctor_prompt(self.item, self.show_options)},
            {"role": "user", "content": opening},
        ]

    async def step(self, reply: str, turn: int) -> Feedback:
        visible = answer_section(reply)
        if visible is None:  # malformed reasoning: the consultation cannot go on
            return Feedback(done=True, info={"malformed": True})
        if medqa.states_diagnosis(visible):
            self.stated = True
            self.diagnosis = medqa.diagnosis_of(reply)
            self.chosen = medqa.named_option(self.diagnosis, self.item, self.show_options)
            return Feedback(done=True, info={"diagnosis": self.diagnosis, "chosen": self.chosen})
        answer = await self.patient.reply_to(visible.strip())
        return Feedback(messages=[{"role": "user", "content": answer}])

    @property
    def correct(self) -> bool:
        """Whether the stated diagnosis names the right option."""
        return self.chosen == self.item.answer_idx


class DoctorEnvConfig(MultiTurnEnvConfig):
    """MultiTurnEnvConfig plus the data, the options shown and the patient's sampling."""

    ignored_original_keys = {
        "debug_mode": "set by the original's config_init; nothing of the original read it"
    }

    max_turns: int = Field(
        11, ge=1, description="doctor replies per consultation (questions and the diagnosis)"
    )
    dataset_path: Optional[str] = Field(None, description="local training cases (question, options, answer)")
    eval_dataset_path: Optional[str] = Field(None, description="local evaluation cases (same schema)")
    eval_size: int = Field(
        128, ge=1, description="evaluation cases (the first of the shuffled evaluation set)"
    )
    show_options: bool = Field(True, description="list the case's answer options in the doctor's prompt")
    patient_max_tokens: int = Field(512, ge=1, description="token budget of one patient answer")
    patient_temperature: float = Field(1.0, ge=0.0, description="sampling temperature of the patient")
    shuffle_seed: int = Field(42, description="seed of the case order and the training personas")


class DoctorEnv(LocalServerDefaults, MultiTurnEnv):
    """A doctor questioning a simulated patient towards a MedQA diagnosis (see the module docstring)."""

    name = "doctor"
    env_config_cls = DoctorEnvConfig
    config: DoctorEnvConfig
    #: The CLI's extra-server namespace: ``--patient.*`` flags and the ``patient:`` YAML section.
    teacher_namespace = "patient"

    def __init__(
        self,
        config: DoctorEnvConfig,
        server_configs,
        slurm: bool = False,
        testing: bool = False,
        *,
        teacher_server_configs: Any = None,
    ):
        """``teacher_server_configs`` (the CLI passes ``--patient.*`` here): the patient's server(s);
        ``None`` plays the patient on the policy's own servers."""
        super().__init__(config, server_configs, slurm, testing)
        patient = teacher_server_configs
        self.patient_server = ServerManager(patient, slurm=False, testing=testing) if patient else self.server
        self.train: list[medqa.MedQAItem] = []
        self.test: list[medqa.MedQAItem] = []
        self.persona_rng = random.Random(config.shuffle_seed)

    @classmethod
    def teacher_config_init(cls) -> None:
        """No patient server by default: the policy's own servers play the patient."""
        return None

    @classmethod
    def default_env_config(cls) -> DoctorEnvConfig:
        return DoctorEnvConfig(
            group_size=32,
            max_num_workers=128,
            total_steps=100,
            batch_size=1024,
            steps_per_eval=20,
            max_token_length=1024 * 15,
            eval_handling=EvalHandlingEnum.LIMIT_TRAIN,
            eval_limit_ratio=0.1,
        )

    async def _close_inference_clients(self) -> None:
        """Close a separate patient server's connections too."""
        await super()._close_inference_clients()
        if self.patient_server is not self.server:
            await self.patient_server.close()

    # -- data -------------------------------------------------------------------------------------------
    def _items(self, path: Optional[str], split: str) -> list[medqa.MedQAItem]:
        rows = load_rows(
            path, hub_split(medqa.HUB_DATASET, split), ["question", "options", "answer"], medqa.HUB_DATASET
        )
        items = medqa.items_from_rows(rows, str(path or f"{medqa.HUB_DATASET} {split}"))
        random.Random(self.config.shuffle_seed).shuffle(items)
        return items

    async def setup(self) -> None:
        cfg = self.config
        self.train = self._items(cfg.dataset_path, "train")
        if cfg.eval_dataset_path or not cfg.dataset_path:
            self.test = self._items(cfg.eval_dataset_path, "test")[: cfg.eval_size]
        else:
            self.test = self.train[: cfg.eval_size]

    async def get_next_item(self) -> medqa.MedQAItem:
        return self.next_in_turn(self.train)

    def eval_items(self) -> Sequence[medqa.MedQAItem]:
        return self.test

    # -- episodes ---------------------------------------------------------------------------------------
    def persona(self, item: medqa.MedQAItem, evaluation: bool) -> int:
        """The persona of a consultation: random in training, fixed by the case in evaluation."""
        if evaluation:
            return zlib.crc32(item.question.encode()) % len(patient_sim.patient_profiles)
        return self.persona_rng.randrange(len(patient_sim.patient_profiles))

    async def new_session(self, item: medqa.MedQAItem, *, evaluation: bool = False) -> Consultation:
        profile = patient_sim.patient_profiles[self.persona(item, evaluation)]
        sampling = {
            "max_tokens": self.config.patient_max_tokens,
            "temperature": self.config.patient_temperature,
        }
        patient = patient_sim.Patient(profile.format(symptoms=item.question), self.patient_server, sampling)
        consultation = Consultation(item, patient, self.config.show_options)
        await consultation.open()
        return consultation

    def outcome_reward(self, session: Consultation, episode: Episode) -> float:
        return 1.0 if session.correct else -1.0

    def episode_metrics(self, session: Consultation, episode: Episode) -> dict[str, float]:
        questions = len(episode.turns) - (1 if session.stated else 0)
        return {
            "correct": float(session.correct),
            "diagnosed": float(session.stated),
            "questions": float(questions),
        }

    def eval_sample_fields(
        self, item: medqa.MedQAItem, session: Consultation, episode: Episode
    ) -> dict[str, Any]:
        return {
            "question": item.question,
            "answer_idx": item.answer_idx,
            "answer": item.answer,
            "diagnosis": session.diagnosis,
            "chosen": session.chosen,
        }


if __name__ == "__main__":
    DoctorEnv.cli()
