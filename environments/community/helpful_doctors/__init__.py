"""Helpful doctors: a doctor model questions a simulated patient about a MedQA case (see ``doctor.py``)."""
