"""OCR-VQA: questions about book covers (title, author, genre, edition ...), answered in ``<answer>`` tags.

Data: ``howard-hou/OCR-VQA`` (``train``; the last ``eval_size`` rows held out), or a local file with its
fields ``image``, ``questions`` and ``answers`` (lists of the same length: every question of a row becomes an
item). Reward: 1 when the one ``<answer>`` after the reasoning says the gold answer (case, articles and
punctuation ignored: ``J.K. Rowling`` = ``jk rowling``; numbers by value), else 0; no tag, tags that
disagree, or a malformed think block score 0.

``python environments/multimodal_dpo/ocr_vqa.py process --env.dataset_path FILE``
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from atroposlib.envs.vision import VisionItem, VisionQAEnv


class OcrVqaEnv(VisionQAEnv):
    """Book-cover questions (see the module docstring)."""

    name = "ocr_vqa"
    hub_dataset = "howard-hou/OCR-VQA"
    required_fields = ("image", "questions", "answers")
    system_prompt = (
        "Read the picture and answer the question. You may reason inside <think> </think> tags first. Submit "
        "your answer enclosed in <answer> tags, e.g. <answer>YOUR_ANSWER</answer>."
    )

    def row_items(self, row: dict[str, Any], index: int, base_dir: Optional[Path]) -> list[VisionItem]:
        questions, answers = row["questions"], row["answers"]
        if not isinstance(questions, list) or not isinstance(answers, list) or len(questions) != len(answers):
            raise ValueError("fields 'questions' and 'answers' must be lists of the same length")
        return [
            VisionItem(index, str(q), str(a).strip(), row["image"], base_dir)
            for q, a in zip(questions, answers, strict=True)
            if str(a).strip()
        ]


if __name__ == "__main__":
    OcrVqaEnv.cli()
