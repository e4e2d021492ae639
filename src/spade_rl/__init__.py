"""spade-rl: self-play in adaptive synthetic executable environments.

One language model plays two roles: as designer it writes executable Python environments grounded in
corpus documents, as agent it plays them. See README.md for how to run it.
"""

__version__ = "0.1.0"
