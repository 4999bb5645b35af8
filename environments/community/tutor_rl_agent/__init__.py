"""A tutor teaching a simulated student, rewarded by the student's progress (see ``tutor_env.py``)."""
