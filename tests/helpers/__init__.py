"""Helpers shared by the tests: registered groups, scripted servers, sample environments, tool runners."""
