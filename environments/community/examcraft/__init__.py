"""ExamCraft: an adaptive teacher's questions, explanations and lesson plans for a simulated student (see
``examcraft_server.py``)."""
