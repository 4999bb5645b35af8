"""Tokenizer wrappers with corrected chat templates."""
