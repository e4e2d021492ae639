"""The designer side: prompts, parsing of designer output, hints, and the validation battery."""

from spade_rl.design.validate import ValidationReport, ValidationSettings, validate_source

__all__ = ["ValidationReport", "ValidationSettings", "validate_source"]
