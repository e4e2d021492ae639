"""spade-rl's environments used from other tools, and other tools' environments played in spade-rl.

Generated environments stay hostile here too: every adapter in this package plays them through
:mod:`spade_rl.sandbox`, never by importing their code into the caller's process.
"""
