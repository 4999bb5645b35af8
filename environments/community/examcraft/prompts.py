"""What the teacher reads: the system prompt (the student's profile, the moves and their JSON form) and
each turn's report on the student."""

from __future__ import annotations

import json
from typing import Any

from environments.community.tutor_rl_agent.student import SimulatedStudent

_FORMAT = {
    "action_type": "QUESTION",
    "topic": "topic_name",
    "difficulty": "easy|medium|hard",
    "content": {
        "question": "Clear, engaging question text",
        "options": {"A": "First option", "B": "Second option", "C": "Third option", "D": "Fourth option"},
        "correct_answer": "A|B|C|D",
        "explanation": "Why the correct answer is right and the others are wrong",
        "learning_objective": "What this question teaches",
    },
}


def system_prompt(profile: dict[str, Any], lesson_plans: bool) -> str:
    """The teacher's role, the student's profile and the moves (a lesson plan only when ``lesson_plans``)."""
    topics = "\n".join(f"- {name}: {value:.0%} proficiency" for name, value in profile["proficiency"].items())
    plan = (
        '\n3. LESSON_PLAN: end the session with a study plan, content {"prioritized_topics": [topics, most '
        'urgent first], "study_activities": [...], "timeline": "...", "learning_objectives": [...]}'
        if lesson_plans
        else ""
    )
    return (
        f"You are ExamCraft, an adaptive AI teacher specializing in {profile.get('target_grade', 'high school')} "
        f"education.\n\nSTUDENT PROFILE:\n{topics}\nLearning Goal: {profile.get('learning_goal', 'Academic improvement')}\n"
        f"Preferred Style: {profile.get('preferred_learning_style', 'mixed')}\n\n"
        "TEACHING CAPABILITIES:\n1. QUESTION: an adaptive multiple-choice question (four options)\n"
        '2. EXPLANATION: explain a topic, content {"explanation": "..."}' + plan + "\n\n"
        "RESPONSE FORMAT: after optional reasoning inside <think> </think> tags, reply with exactly one valid "
        f"JSON object and nothing else, for example:\n{json.dumps(_FORMAT, indent=2)}\n\n"
        "TEACHING STRATEGY: prioritize topics with low proficiency and pitch each question at the student's "
        "level: the student learns most from questions that are neither too easy nor too hard."
    )


def observation(student: SimulatedStudent, questions_left: int) -> str:
    """This turn's report: proficiencies, recent answers and the questions left."""
    levels = json.dumps({name: round(value, 3) for name, value in student.proficiency.items()}, indent=2)
    recent = [
        f"{topic} ({level}): {'right' if right else 'wrong'}" for topic, level, right in student.history[-3:]
    ]
    accuracy = student.accuracy()
    return (
        ("TEACHING SESSION UPDATE\n" if student.history else "NEW TEACHING SESSION STARTED\n")
        + (f"Recent answers: {'; '.join(recent)}\n" if recent else "")
        + (f"Overall accuracy: {accuracy:.0%}\n" if accuracy is not None else "")
        + f"Current topic proficiencies:\n{levels}\nQuestions left: {questions_left}\n"
        "Choose your next teaching action."
    )
