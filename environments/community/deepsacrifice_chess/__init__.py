"""DeepSacrifice: chess moves rewarded for sound sacrificial attacking play."""
