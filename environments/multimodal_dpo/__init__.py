"""Visual question answering environments on hub data sets (OCR-VQA, CLEVR, PixMo), built on
:class:`atroposlib.envs.vision.VisionQAEnv`."""
