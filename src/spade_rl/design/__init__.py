"""The designer side: prompts, parsing of designer output, hints, the validation battery, and the LLM
validator's prompt and verdict."""

from spade_rl.design.llm_validator import LLMValidatorSettings
from spade_rl.design.validate import ValidationReport, ValidationSettings, validate_source

__all__ = ["LLMValidatorSettings", "ValidationReport", "ValidationSettings", "validate_source"]
